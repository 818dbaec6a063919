package engine

import (
	"os"
	"os/signal"
	"sync"
)

// pluginsStopOnInterrupt makes every plugin the engine starts stop on
// SIGINT. The engine ends a plugin with a SIGINT to its process group and
// then waits up to 5 s before it kills it (pulumi sdk/v3 v3.276.0
// common/resource/plugin/plugin.go, the kill closure of execPlugin). A
// process started with SIGINT ignored (a `cmd &` of a non-interactive
// shell, some supervisors) passes the ignore to every program it execs:
// each plugin then ignores the SIGINT, and each plugin shutdown costs the
// whole 5 s (every bench operation did). A caught signal is reset to the
// default on exec, an ignored one is not: catching SIGINT into a channel
// nobody reads keeps this process ignoring it and gives the plugins the
// default. A process that handles SIGINT itself (milner) is left as is.
var pluginsStopOnInterrupt = sync.OnceFunc(func() {
	if signal.Ignored(os.Interrupt) {
		signal.Notify(make(chan os.Signal, 1), os.Interrupt)
	}
})
