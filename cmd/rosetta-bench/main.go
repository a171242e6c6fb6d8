// Command rosetta-bench drives load against a Rosetta node (and measures
// the storage engine in process): the Kafka, RocketMQ remoting and
// RocketMQ 5 load generators use the real client libraries, which is why
// they live here and not in the server binary, which links no client.
package main

import (
	"fmt"
	"os"
)

func main() {
	root := benchCmd()
	root.Use = "rosetta-bench"
	root.SilenceUsage, root.SilenceErrors = true, true
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "rosetta-bench:", err)
		os.Exit(1)
	}
}
