package version

import "testing"

func TestString(t *testing.T) {
	oldVersion, oldCommit := Version, Commit
	t.Cleanup(func() { Version, Commit = oldVersion, oldCommit })
	Version, Commit = "v1.2.3-4-gabcdef0", "abcdef0123456789"
	if got, want := String(), "v1.2.3-4-gabcdef0 (commit abcdef0123456789)"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}
