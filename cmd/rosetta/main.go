// Command rosetta is the Rosetta message broker: `rosetta serve` runs a node,
// `rosetta version` prints the build, and
// `rosetta topic|group|message|dlq|txn|user|acl|quota|cluster` operate a running
// node through its admin API. It links no client library: the load
// generators are cmd/rosetta-bench.
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
	root.AddCommand(serveCmd(), versionCmd(), userCmd(), aclCmd(), quotaCmd(), clusterCmd(),
		topicCmd(), groupCmd(), messageCmd(), dlqCmd(), txnCmd(), timerCmd(), storageCmd(), mqttCmd())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })
	usageErrors(root)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "rosetta:", err)
		os.Exit(exitCode(err))
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

// usageErrors makes wrong arguments usage errors (exit status 2), as wrong
// flags are; a command that only groups others prints its help when given
// none and refuses an unknown one with its usage.
func usageErrors(c *cobra.Command) {
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return &usageError{msg: fmt.Sprintf("unknown command %q for %q\n\n%s", args[0], cmd.CommandPath(), cmd.UsageString())}
			}
			return nil
		}
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		for _, sub := range c.Commands() {
			usageErrors(sub)
		}
		return
	}
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return &usageError{msg: err.Error()}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usageErrors(sub)
	}
}
