// Command pause is the sandbox process of the node tier's pods (test/framework's kubelet nodes):
// it holds a pod's namespaces and does nothing else until the runtime stops it. No registry is
// reachable from the test machines, so the image that carries it is built here (imagebuild pause)
// instead of pulled.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
