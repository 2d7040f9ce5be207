package main

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadNpy feeds arbitrary bytes to the .npy reader: it must return an
// array or a one-line error naming the file, never panic. Seeds are the
// committed fixtures (valid, truncated, wrong dtype …).
func FuzzReadNpy(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.npy")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x93NUMPY\x01\x00"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "x.npy")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := readNpy(path)
		if err != nil {
			if a != nil {
				t.Fatalf("array and error: %v", err)
			}
			return
		}
		n := 1
		for _, s := range a.Shape {
			n *= s
		}
		switch d := a.Data.(type) {
		case []float32:
			if len(d) != n {
				t.Fatalf("%d elements for shape %v", len(d), a.Shape)
			}
		default:
			_ = d
		}
	})
}
