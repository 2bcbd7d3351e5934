#!/bin/sh
# guest.sh BINDIR: runs layerseal's privileged test suites on the running
# kernel, as root, and reports on stdout in lines starting "@@kt " that
# kernel-tests/run reads (from a qemu serial console or from the host):
#
#	@@kt kernel RELEASE
#	@@kt suite MODE NAME begin
#	@@kt suite MODE NAME pass|fail EXIT SECONDS
#	@@kt report MODE KEY VALUE        (from the session test)
#	@@kt probe MODE begin / JSON lines / @@kt probe MODE end
#	@@kt end
#
# MODE is "plain", or "nostatx" for the suites run again under
# BINDIR/nostatx, which makes statx fail with ENOSYS as before Linux 4.11.
# BINDIR is what kernel-tests/build.sh made. Environment:
#	KT_SUITES          suites to run (default: every BINDIR/tests/*.test)
#	KT_NOSTATX_SUITES  suites to run under nostatx (default: the suites
#	                   above; see left_out for the tests not run there)
#	KT_SHORT           1 (default): pass -test.short
#	KT_VERBOSE         1: pass -test.v (every test's name and time)
#	KT_ALL             1: run the kernel-independent tests too (see
#	                   kernel_independent)
#	KT_PLAIN           0: run only the nostatx pass (its own guest, so that
#	                   the two passes of one kernel can run side by side);
#	                   probe: of the plain pass only the probe (the host's
#	                   plain suites ran in scripts/test's go test)
#	LAYERSEAL_KT_INJECT_FAILURE=1  makes the kernel-tests suite fail
# Exits 0 when every suite passed, 1 otherwise. Works with busybox sh.
set -u
bin=$(cd "$1" && pwd)
say() { echo "@@kt $*"; }

all=""
for t in "$bin"/tests/*.test; do
	[ -e "$t" ] || continue
	n=${t##*/}
	all="$all ${n%.test}"
done
suites=${KT_SUITES:-$all}
nostatx_suites=${KT_NOSTATX_SUITES-$suites}
short=""
[ "${KT_SHORT:-1}" = 1 ] && short="-test.short"
[ "${KT_VERBOSE:-0}" = 1 ] && short="$short -test.v"
export LAYERSEAL_PRIVILEGED=1 LAYERSEAL_KT_CLI="$bin/layerseal"
failed=0

# left_out NAME: a -test.skip pattern of the tests of suite NAME not run
# under nostatx, because they still expect statx mount IDs instead of
# following the probe's findings. Reported, so the matrix shows them.
left_out() {
	case $1 in
	cmd-layerseal) echo '^(TestCheckpoint|TestHostile|TestStageDiffApplyDiscard$|TestSweepProtected$)' ;;
	esac
}

# kernel_independent NAME: a -test.skip pattern of the tests of suite NAME
# whose subject does not depend on the kernel (signature algorithms and
# formats, proofs, the transparency log, printed reports): guest.sh does not
# run them, on any kernel, because scripts/test's go test runs them on the
# host. KT_ALL=1 runs them too. Reported, so the matrix shows them.
kernel_independent() {
	[ "${KT_ALL:-0}" = 1 ] && return
	case $1 in
	cmd-layerseal) echo '^(TestRunEachAlgorithm|TestKeygenAlgorithms|TestLogWitnessVerify|TestVerifyRejects|TestShowReport|TestProveVerify|TestProveSubtreeExport)$' ;;
	esac
}

# suite MODE NAME: runs one test binary in a fresh directory.
suite() {
	mode=$1 name=$2
	wrap="" skip=""
	if [ "$mode" = nostatx ]; then
		wrap="$bin/nostatx"
		skip=$(left_out "$name")
	fi
	[ -n "$skip" ] && say report "$mode" left-out "$name $skip"
	ki=$(kernel_independent "$name")
	[ -n "$ki" ] && say report "$mode" kernel-independent "$name $ki"
	skip=$skip${skip:+${ki:+|}}$ki
	dir=$(mktemp -d) || { say suite "$mode" "$name" fail 125 0; failed=1; return; }
	report="$dir/.report"
	say suite "$mode" "$name" begin
	start=$(date +%s)
	if [ -x "$bin/tests/$name.test" ]; then
		(cd "$dir" && LAYERSEAL_KT_REPORT="$report" $wrap "$bin/tests/$name.test" $short -test.count=1 -test.timeout=20m ${skip:+-test.skip="$skip"} 2>&1)
		rc=$?
	else
		echo "no test binary $bin/tests/$name.test"
		rc=127
	fi
	secs=$(($(date +%s) - start))
	if [ -f "$report" ]; then
		while read -r key value; do say report "$mode" "$key" "$value"; done <"$report"
	fi
	rm -rf "$dir"
	if [ "$rc" -eq 0 ]; then
		say suite "$mode" "$name" pass 0 "$secs"
	else
		say suite "$mode" "$name" fail "$rc" "$secs"
		failed=1
	fi
}

# probe MODE: the probe's findings as JSON.
probe() {
	wrap=""
	[ "$1" = nostatx ] && wrap="$bin/nostatx"
	say probe "$1" begin
	$wrap "$bin/layerseal" probe --json || failed=1
	echo
	say probe "$1" end
}

say kernel "$(uname -r)"
if [ "${KT_PLAIN:-1}" != 0 ]; then
	probe plain
	if [ "${KT_PLAIN:-1}" != probe ]; then
		for s in $suites; do suite plain "$s"; done
	fi
fi
if [ -n "$nostatx_suites" ]; then
	probe nostatx
	for s in $nostatx_suites; do suite nostatx "$s"; done
fi
say end
exit "$failed"
