// Command kubectl-etcdmember is the etcdmember kubectl plugin (`kubectl etcdmember ...`) and, as
// its hidden `serve` subcommand, the node agent every etcd node runs.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/etcdmember/kubectl-etcdmember/cmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	err := cmd.NewRootCommand(streams).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(cmd.ExitCode(err))
	}
}
