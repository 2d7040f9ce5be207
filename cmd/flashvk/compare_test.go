package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// compare warns when a file shares no problem with the first.
func TestCompareNoSharedProblem(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	tinyBench(t, a, "--causal=false")
	tinyBench(t, b, "--causal=true")
	code, out, errs := flashvk(t, "compare", a, b)
	if code != 0 || !strings.Contains(errs, "warning: a.json and b.json share no problem") || !strings.Contains(out, "geomean") {
		t.Errorf("compare of disjoint files: exit %d\n%s\n%s", code, out, errs)
	}
	if _, _, errs := flashvk(t, "compare", a, a); errs != "" {
		t.Errorf("compare of a file with itself warns: %s", errs)
	}
}

// report creates a missing output folder, and writes nothing when one of
// its outputs cannot be written.
func TestReportFolders(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.json")
	tinyBench(t, a, "--causal=false")
	md := filepath.Join(dir, "new", "deeper", "r.md")
	html := filepath.Join(dir, "html", "r.html")
	mustRun(t, "report", a, "--markdown", md, "-o", html)
	for _, p := range []string{md, html, filepath.Join(dir, "new", "deeper", "r-fwd-d16-non-causal.svg")} {
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
	}
	// A folder that cannot be made (a file is in the way): nothing written.
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	html2 := filepath.Join(dir, "second.html")
	code, _, errs := flashvk(t, "report", a, "-o", html2, "--markdown", filepath.Join(blocker, "r.md"))
	if code == 0 || !strings.Contains(errs, "--markdown") {
		t.Errorf("report into a file: exit %d: %s", code, errs)
	}
	if _, err := os.Stat(html2); !os.IsNotExist(err) {
		t.Errorf("the HTML was written although the Markdown could not be: %v", err)
	}
	// -o naming a chart --markdown writes: refused, nothing written.
	chart := filepath.Join(dir, "third", "r-fwd-d16-non-causal.svg")
	code, _, errs = flashvk(t, "report", a, "-o", chart, "--markdown", filepath.Join(dir, "third", "r.md"))
	if code != 2 || !strings.Contains(errs, "is also the file of --markdown") {
		t.Errorf("-o onto a chart of --markdown: exit %d: %s", code, errs)
	}
	if _, err := os.Stat(chart); !os.IsNotExist(err) {
		t.Errorf("report wrote %s: %v", chart, err)
	}
	// bench --json makes its folder too.
	tinyBench(t, filepath.Join(dir, "results", "b.json"), "--causal=false")
}
