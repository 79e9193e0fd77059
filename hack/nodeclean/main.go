// Command nodeclean puts the host back after a node tier run that was killed before it could
// (make node-clean): the next run does the same before it starts, but a machine should not wait
// for it. It kills what the run left (containerd's shims, the containers in the tier's cgroups),
// removes the cgroups, writes the kernel's sysctls back from the run's record and checks the host.
package main

import (
	"fmt"
	"os"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

func main() {
	restored, err := framework.CleanKilledRun()
	if err != nil {
		fmt.Fprintf(os.Stderr, "node-clean: %v\n", err)
		os.Exit(1)
	}
	if !restored {
		fmt.Println("node-clean: no killed node tier run left anything to restore")
		return
	}
	fmt.Println("node-clean: the host is as the killed node tier run found it")
}
