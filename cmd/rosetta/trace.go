package main

import (
	"fmt"
	"net/url"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/rosettamq/rosetta/internal/apiv1"
)

// messageTraceCmd is rosetta message trace: a message's recorded lifecycle.
func messageTraceCmd(a *adminClient, out *string) *cobra.Command {
	var topic string
	var queue int
	var offset int64
	cmd := &cobra.Command{Use: "trace [MESSAGE-ID]", Short: "A message's lifecycle: produced, delivered, acknowledged, retried, dead-lettered, timer, transaction",
		Long: `Show what the broker recorded of a message's life, by its message id (a
RocketMQ msgId) or by its place (--topic, --queue, --offset). Only messages of
topics with message trace on are recorded (topic config message_trace, Kafka
rosetta.message.trace=true, or broker.message_trace_all).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := url.Values{}
			switch {
			case len(args) == 1:
				q.Set("id", args[0])
			case topic != "" && offset >= 0:
				q.Set("topic", topic)
				q.Set("queue", strconv.Itoa(queue))
				q.Set("offset", strconv.FormatInt(offset, 10))
			default:
				return &usageError{msg: "name a message id, or --topic, --queue and --offset"}
			}
			var tr apiv1.MessageTrace
			if err := a.call(cmd, "GET", "/api/v1/trace?"+q.Encode(), nil, &tr); err != nil {
				return err
			}
			if done, err := output(cmd, *out, tr); done {
				return err
			}
			if len(tr.Events) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "nothing recorded (is message trace on for its topic?)")
				return nil
			}
			var rows [][]string
			for _, e := range tr.Events {
				where := e.Topic + " " + strconv.Itoa(int(e.Queue)) + "@" + strconv.FormatInt(e.Offset, 10)
				if e.Offset < 0 {
					where = e.Topic + " (waiting)"
				}
				attempt := ""
				if e.Attempt > 0 {
					attempt = strconv.Itoa(int(e.Attempt))
				}
				rows = append(rows, []string{e.Time, e.Kind, where, e.Protocol, e.Group, e.Client, attempt, e.Detail})
			}
			return table(cmd, "TIME\tEVENT\tWHERE\tPROTOCOL\tGROUP\tCLIENT\tATTEMPT\tDETAIL", rows)
		}}
	cmd.Flags().StringVar(&topic, "topic", "", "the message's topic (with --queue and --offset)")
	cmd.Flags().IntVar(&queue, "queue", 0, "its queue")
	cmd.Flags().Int64Var(&offset, "offset", -1, "its offset")
	return cmd
}
