//go:build !linux

package hostpath

import (
	"context"
	"errors"
)

// Run fails at once: the driver bind mounts volumes, freezes cgroups and
// copies data with system calls only Linux has, so it is built for Linux
// only. Options and their validation build everywhere, so that the command
// and its flags do too.
func Run(context.Context, Options) error {
	return errors.New("the hostpath driver runs on Linux only")
}
