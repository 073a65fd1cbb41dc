# make install / make uninstall: headers, archives, tools, pkg-config files and man pages.
#   make install PREFIX=/opt/keel DESTDIR=/tmp/stage
# uninstall removes every file install wrote and the folders install made (recorded in
# $(KEEL_DATADIR)/installed-dirs), once empty: never a folder that was there before.
# pkg-config files: keel (runtime + start-up library), keel-dpdk, keel-verbs and keel-cuda (one
# per optional part, installed when it was built). The libraries are static: `pkg-config --libs`
# already gives the whole link line, and --static adds the backends' own static dependencies.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
KEEL_DATADIR = $(DATADIR)/keel
MAN1 := $(sort $(wildcard docs/man/*.1))
MAN7 := $(sort $(wildcard docs/man/*.7))
INSTALL_DIRS = $(BINDIR) $(LIBDIR) $(INCLUDEDIR)/keel $(PKGCONFIGDIR) $(MANDIR)/man1 \
	$(MANDIR)/man7 $(KEEL_DATADIR)
INSTALL_MANIFEST = $(DESTDIR)$(KEEL_DATADIR)/installed-dirs
KEEL_VERSION := $(shell sed -n 's/^\#define KEEL_VERSION[ \t]*"\(.*\)"/\1/p' include/keel/version.h)

comma := ,
INSTALL_LIBS = $(LIBKEEL) $(LIBBOOT) $(if $(filter 1,$(HAVE_DPDK)),$(BUILD)/libkeel_dpdk.a) \
	$(if $(filter 1,$(HAVE_VERBS)),$(BUILD)/libkeel_verbs.a) \
	$(if $(filter 1,$(HAVE_CUDA)),$(BUILD)/libkeel_cuda.a)
INSTALL_BINS = $(TOOLS) $(KEEL_SIM)
INSTALL_PC := keel $(if $(filter 1,$(HAVE_DPDK)),keel-dpdk) $(if $(filter 1,$(HAVE_VERBS)),keel-verbs) \
	$(if $(filter 1,$(HAVE_CUDA)),keel-cuda)

# One pkg-config file: name, description, Requires, Libs.
define pc_file
	{ echo 'prefix=$(PREFIX)'; echo 'libdir=$(LIBDIR)'; echo 'includedir=$(INCLUDEDIR)'; echo; \
	  echo 'Name: $(1)'; echo 'Description: $(2)'; echo 'Version: $(KEEL_VERSION)'; \
	  $(if $(3),echo 'Requires: $(3)';) \
	  echo 'Cflags: -I$${includedir}'; echo 'Libs: $(strip $(4))'; } >$(DESTDIR)$(PKGCONFIGDIR)/$(1).pc
endef

.PHONY: install uninstall
# Each folder with its missing parents, one at a time; the ones made (without DESTDIR) are added
# to the manifest, which keeps what an earlier install made.
install: all
	@made=; for d in $(INSTALL_DIRS); do \
		miss=; p="$(DESTDIR)$$d"; \
		while [ ! -d "$$p" ]; do miss="$$p $$miss"; p=$$(dirname "$$p"); done; \
		for m in $$miss; do \
			mkdir "$$m" || exit 1; \
			[ -z "$${m#$(DESTDIR)}" ] || made="$$made $${m#$(DESTDIR)}"; \
		done; \
	done; \
	{ cat "$(INSTALL_MANIFEST)" 2>/dev/null; for m in $$made; do echo "$$m"; done; } | \
		sort -u >"$(INSTALL_MANIFEST).tmp" && mv "$(INSTALL_MANIFEST).tmp" "$(INSTALL_MANIFEST)"
	install -m 644 include/keel/*.h $(DESTDIR)$(INCLUDEDIR)/keel/
	install -m 644 $(MAN1) $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(MAN7) $(DESTDIR)$(MANDIR)/man7/
	install -m 644 $(INSTALL_LIBS) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(INSTALL_BINS) $(DESTDIR)$(BINDIR)/
	$(call pc_file,keel,keel: fault-tolerant collectives and membership (runtime and start-up),$(strip $(if $(filter 1,$(HAVE_SODIUM)),libsodium) $(if $(filter 1,$(HAVE_URING)),liburing)),\
		-L$${libdir} -lkeel_boot -lkeel -lm)
ifeq ($(HAVE_DPDK),1)
	$(call pc_file,keel-dpdk,keel: the DPDK transport and its start-up,keel libdpdk,\
		-Wl$(comma)-u$(comma)keel_boot_dpdk_start -L$${libdir} -lkeel_dpdk)
endif
ifeq ($(HAVE_VERBS),1)
	$(call pc_file,keel-verbs,keel: the ibverbs transport and its start-up,keel libibverbs,\
		-Wl$(comma)-u$(comma)keel_boot_verbs_start -L$${libdir} -lkeel_verbs)
endif
ifeq ($(HAVE_CUDA),1)
	$(call pc_file,keel-cuda,keel: the CUDA device (AllReduce on GPU buffers),keel,\
		-L$${libdir} -lkeel_cuda -L$(CUDA_HOME)/lib64 -l:libcudart_static.a -ldl -lrt -lpthread)
endif
	@echo "keel: installed in $(DESTDIR)$(PREFIX) (pkg-config: $(INSTALL_PC))"

uninstall:
	rm -f $(addprefix $(DESTDIR)$(INCLUDEDIR)/keel/,$(notdir $(wildcard include/keel/*.h)))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(MAN1))) \
		$(addprefix $(DESTDIR)$(MANDIR)/man7/,$(notdir $(MAN7)))
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,libkeel.a libkeel_boot.a libkeel_dpdk.a \
		libkeel_verbs.a libkeel_cuda.a)
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(TOOLS)) keel-sim)
	rm -f $(addprefix $(DESTDIR)$(PKGCONFIGDIR)/,keel.pc keel-dpdk.pc keel-verbs.pc \
		keel-cuda.pc)
	@# deepest first (a reverse sort puts a folder after what it holds); rmdir only if empty
	@if [ -f "$(INSTALL_MANIFEST)" ]; then \
		dirs=$$(sort -r "$(INSTALL_MANIFEST)"); rm -f "$(INSTALL_MANIFEST)"; \
		for d in $$dirs; do rmdir "$(DESTDIR)$$d" 2>/dev/null || true; done; \
	fi
	@rmdir "$(DESTDIR)$(INCLUDEDIR)/keel" 2>/dev/null || true # keel's own (an older install)
