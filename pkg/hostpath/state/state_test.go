package state

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTablePersistsAndCleansTempFiles(t *testing.T) {
	dir := t.TempDir()
	tab, err := OpenTable[Volume](dir, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.Put("vol-a", Volume{ID: "vol-a", CapacityBytes: 7}); err != nil {
		t.Fatal(err)
	}
	if err := tab.Put("vol-b", Volume{ID: "vol-b"}); err != nil {
		t.Fatal(err)
	}
	if err := tab.Delete("vol-b"); err != nil {
		t.Fatal(err)
	}
	// A write torn by a crash leaves only a temp file behind.
	if err := os.WriteFile(filepath.Join(dir, tempPrefix+"vol-c.json-123"), []byte(`{"id":`), 0o600); err != nil {
		t.Fatal(err)
	}

	again, err := OpenTable[Volume](dir, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := again.Get("vol-a"); !ok || got.CapacityBytes != 7 {
		t.Fatalf("vol-a = %v, %t", got, ok)
	}
	if ids := again.IDs(); len(ids) != 1 {
		t.Fatalf("IDs = %v, want only vol-a", ids)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("dir holds %d entries, want the one record", len(entries))
	}
}

func TestOpenTableRejectsCorruptRecord(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "vol-a.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenTable[Volume](dir, false); err == nil {
		t.Fatal("corrupt record accepted")
	}
}
