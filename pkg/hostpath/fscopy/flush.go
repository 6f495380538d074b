//go:build linux

package fscopy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// Making copies and restored data durable.

// FlushTree makes a copy renamed into place at root durable: it flushes
// the copy's directories and, concurrently, the directory holding root.
// Regular files were flushed by the copy.
func FlushTree(root string, c Copied) error {
	var parentErr error
	var wg sync.WaitGroup
	wg.Go(func() { parentErr = state.SyncDir(filepath.Dir(root)) })
	err := FlushDirs(root, c.Dirs)
	wg.Wait()
	return errors.Join(err, parentErr)
}

// FlushDirs flushes the directories dirs, relative to root.
func FlushDirs(root string, dirs []string) error {
	var errs []error
	for _, d := range dirs {
		errs = append(errs, state.Fsync(filepath.Join(root, d)))
	}
	return errors.Join(errs...)
}

// SyncTree fsyncs a regular file, or every file and directory of a tree,
// opening each entry as beneath.go describes.
func SyncTree(root string) error {
	f, st, err := openRoot(root, unix.O_RDONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	if isDirMode(st.Mode) {
		if err := syncDirTree(int(f.Fd()), 0); err != nil {
			return err
		}
	}
	return f.Sync()
}

// syncDirTree fsyncs the files and directories below the directory fd.
func syncDirTree(fd, depth int) error {
	if depth >= maxTreeDepth {
		return fmt.Errorf("the tree is more than %d levels deep", maxTreeDepth)
	}
	entries, err := listDir(fd)
	if err != nil {
		return err
	}
	for _, l := range entries {
		var f *os.File
		switch l.kind() {
		case unix.S_IFDIR:
			f, _, err = openListedDir(fd, l)
			if err == nil {
				err = syncDirTree(int(f.Fd()), depth+1)
			}
		case unix.S_IFREG:
			f, _, err = openListedFile(fd, l, unix.O_RDONLY)
		default:
			continue
		}
		if f != nil {
			err = errors.Join(err, f.Sync(), f.Close())
		}
		if err != nil && !errors.Is(err, errChanged) {
			return err
		}
	}
	return nil
}
