// Package spectest holds what the backends' tests share about a
// spec.Problem: Reference, its problem for the float64 reference (package
// reference), and Dropout, its dropout there. Only tests import it.
package spectest
