/* keel's version: the release a program was built against (pkg-config --modversion keel gives
 * the installed one). */
#ifndef KEEL_VERSION_H
#define KEEL_VERSION_H

#define KEEL_VERSION_MAJOR 0
#define KEEL_VERSION_MINOR 2
#define KEEL_VERSION_PATCH 0
#define KEEL_VERSION	   "0.2.0"

#endif
