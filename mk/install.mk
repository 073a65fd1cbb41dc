# make install / make uninstall: headers, archives, tools and pkg-config files.
#   make install PREFIX=/opt/keel DESTDIR=/tmp/stage
# pkg-config files: keel (runtime + start-up library), keel-dpdk, keel-verbs and keel-cuda (one
# per optional part, installed when it was built). The libraries are static: `pkg-config --libs`
# already gives the whole link line, and --static adds the backends' own static dependencies.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
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
install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/keel \
		$(DESTDIR)$(PKGCONFIGDIR)
	install -m 644 include/keel/*.h $(DESTDIR)$(INCLUDEDIR)/keel/
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
	-rmdir $(DESTDIR)$(INCLUDEDIR)/keel 2>/dev/null
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,libkeel.a libkeel_boot.a libkeel_dpdk.a \
		libkeel_verbs.a libkeel_cuda.a)
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(TOOLS)) keel-sim)
	rm -f $(addprefix $(DESTDIR)$(PKGCONFIGDIR)/,keel.pc keel-dpdk.pc keel-verbs.pc \
		keel-cuda.pc)
