// Command rosetta is the Rosetta message broker: `rosetta serve` runs a node,
// `rosetta bench` drives load, `rosetta version` prints the build.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/rosettamq/rosetta/internal/app"
)

func main() {
	root := &cobra.Command{
		Use:           "rosetta",
		Short:         "Rosetta: one broker for Kafka and RocketMQ clients",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serveCmd(), benchCmd(), versionCmd(), userCmd(), aclCmd(), quotaCmd(), clusterCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "rosetta:", err)
		os.Exit(1)
	}
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "rosetta", app.Version)
		},
	}
}
