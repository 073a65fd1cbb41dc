#!/usr/bin/env bash
# Boot Debian's own kernel in QEMU (TCG) with Soft-RoCE (rdma_rxe on lo) and run the verbs tests
# inside it (tests/vm/in_vm.sh), chrooted into this host's root over 9p so host-built binaries
# run unchanged. The kernel package is downloaded and unpacked into a cache, never installed.
# Prints the in-VM output; exits 0 only if everything in the VM passed, 77 when QEMU, busybox or
# the kernel package are not available. Recipe: ../shared/RXE-VM.md.
#   BUILD=build-verbs tests/vm/run.sh      TIMEOUT=240 (seconds for the whole VM)
#   KEEL_VM_STEPS="ar2 kill" runs a subset of the in-VM steps (tests/vm/in_vm.sh)
#   KEEL_VM_SMP=2 gives the VM two vCPUs (busy-polled latency beside perftest; one vCPU, the
#   default, is faster and steadier for the rest on a 2-core host)
set -uo pipefail
cd "$(dirname "$0")/../.."
START=$EPOCHREALTIME
ROOT=$PWD
BUILD=${BUILD:-build}
TIMEOUT=${TIMEOUT:-240}
SMP=${KEEL_VM_SMP:-1}
CACHE=${KEEL_VM_CACHE:-$ROOT/$BUILD/vm}
skip() { echo "verbs VM: skipped: $*"; exit 77; }
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 missing (apt-get install qemu-system-x86)"
[ -x /bin/busybox ] || skip "busybox missing (apt-get install busybox-static)"
command -v rdma >/dev/null || skip "iproute2's rdma tool missing"
[ -x "$BUILD/bin/keel-bench" ] && [ -x "$BUILD/tests/integ-allreduce_check" ] ||
	{ echo "verbs VM: build first (make BUILD=$BUILD all tests)"; exit 1; }
[ -f "$BUILD/libkeel_verbs.a" ] || skip "verbs backend not built (install libibverbs-dev)"
mkdir -p "$CACHE"

# 1. the kernel: the package linux-image-amd64 depends on, downloaded once
if [ ! -d "$CACHE/kernel/boot" ]; then
	PKG=$(apt-cache depends linux-image-amd64 2>/dev/null |
		awk '/Depends: linux-image-[0-9]/{print $2; exit}')
	[ -n "$PKG" ] || skip "no Debian kernel package known to apt (apt-get update?)"
	(cd "$CACHE" && rm -f ./*.deb && timeout 120 apt-get download "$PKG" >/dev/null 2>&1) ||
		skip "could not download $PKG"
	rm -rf "$CACHE/kernel" && dpkg -x "$CACHE"/"$PKG"_*.deb "$CACHE/kernel" || skip "dpkg -x failed"
fi
VMLINUZ=$(ls "$CACHE"/kernel/boot/vmlinuz-* 2>/dev/null | head -1)
[ -n "$VMLINUZ" ] || skip "no vmlinuz in the kernel package"
KVER=${VMLINUZ##*/vmlinuz-}
MODDIR=$CACHE/kernel/lib/modules/$KVER/kernel
# PVH boot of the uncompressed ELF saves the in-guest xz decompression (~2 s under TCG)
KERNEL=$CACHE/vmlinux.elf
if [ ! -s "$KERNEL" ] || [ "$KERNEL" -ot "$VMLINUZ" ]; then
	off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$VMLINUZ" | head -1 | cut -d: -f1)
	[ -n "$off" ] && tail -c +$((off + 1)) "$VMLINUZ" | xz -dc 2>/dev/null >"$KERNEL.$$"
	mv -f "$KERNEL.$$" "$KERNEL" 2>/dev/null # xz may complain of the bytes after the payload
fi
[ "$(head -c 4 "$KERNEL" 2>/dev/null | tail -c 3)" = ELF ] || KERNEL=$VMLINUZ

# 2. initramfs: busybox, rdma tool, modules, our init
# (in a folder of this run's own: two runs from one checkout must not share it)
RUNDIR=$(mktemp -d "$CACHE/run.XXXXXX") || exit 1
trap 'rm -rf "$RUNDIR"' EXIT
R=$RUNDIR/initramfs
mkdir -p "$R"/{bin,usr/bin,lib/modules,proc,sys,dev,tmp}
cp /bin/busybox "$R/bin/busybox"
cp tests/vm/init "$R/init" && chmod +x "$R/init"
for m in crypto/crc32_generic drivers/infiniband/core/ib_core drivers/infiniband/core/ib_uverbs \
	net/ipv4/udp_tunnel net/ipv6/ip6_udp_tunnel drivers/infiniband/sw/rxe/rdma_rxe \
	drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_modern_dev \
	drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci fs/netfs/netfs \
	fs/fscache/fscache net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p; do
	f=$(ls "$MODDIR/$m".ko* 2>/dev/null | head -1)
	[ -n "$f" ] || { [ "$m" = fs/netfs/netfs ] || [ "$m" = fs/fscache/fscache ] && continue; skip "module $m not in the kernel package"; }
	case $f in
	*.xz) xz -dc "$f" >"$R/lib/modules/$(basename "$m").ko" ;;
	*.zst) zstd -qdc "$f" >"$R/lib/modules/$(basename "$m").ko" ;;
	*) cp "$f" "$R/lib/modules/" ;;
	esac
done
cp "$(command -v rdma)" "$R/usr/bin/rdma"
ldd "$(command -v rdma)" | grep -o '/[^ ]*' | while read -r lib; do
	mkdir -p "$R$(dirname "$lib")" && cp -L "$lib" "$R$lib"
done
printf '%s\n' "$ROOT" >"$R/vm_workdir"
printf 'BUILD=%q\n' "$BUILD" >"$R/vm_env"
[ -z "${KEEL_VM_STEPS:-}" ] || printf 'KEEL_VM_STEPS=%q\nexport KEEL_VM_STEPS\n' "$KEEL_VM_STEPS" >>"$R/vm_env"
(cd "$R" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$RUNDIR/initramfs.cpio.gz"

# 3. boot (TCG: the nested /dev/kvm here cannot run a stock kernel), output on the console
LOG=$RUNDIR/console.log
timeout -s KILL "$TIMEOUT" qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp "$SMP" -m 1G \
	-nodefaults -no-user-config -display none -serial stdio -no-reboot -nic none \
	-kernel "$KERNEL" -initrd "$RUNDIR/initramfs.cpio.gz" \
	-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
	-virtfs "local,path=$ROOT,mount_tag=work,security_model=none,multidevs=remap" \
	-append "console=ttyS0 quiet panic=-1" </dev/null 2>&1 | tee "$LOG"
qrc=${PIPESTATUS[0]}
[ "$qrc" = 137 ] && echo "verbs VM: killed after ${TIMEOUT}s"
echo "verbs VM: $(awk -v a="$START" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b - a}') s on the host, initramfs and boot included"
cp "$LOG" "$CACHE/console.log" # the last run's console, for a look afterwards
grep -q '^KEEL_VM_RESULT rc=0' "$LOG"
