// Command hello prints the message stamped into it at link time (a fixture of the imagebuild
// tests).
package main

import "fmt"

// message is set with -ldflags "-X main.message=...".
var message = "unset"

func main() { fmt.Println(message) }
