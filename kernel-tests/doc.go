// Package kerneltests checks layerseal against kernels other than the one
// it was built on. Start with the run script beside this file: it boots
// Debian kernels under qemu with the privileged test suites in an
// initramfs, runs them with guest.sh, runs the same on the host, and prints
// a matrix of kernel × suite with the features the probe found in each.
//
// The package's own test, TestSessionOnThisKernel, is one of those suites:
// an end-to-end session through the layerseal command whose expectations
// follow the probe's findings, never the kernel's version. The matrix
// harness lives in ./matrix, the statx-refusing seccomp wrapper used to
// imitate kernels before 4.11 in ./nostatx.
package kerneltests
