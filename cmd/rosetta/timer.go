package main

import (
	"fmt"
	"net/url"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/rosettamq/rosetta/internal/apiv1"
)

func timerCmd() *cobra.Command {
	a := &adminClient{}
	cmd := &cobra.Command{Use: "timer", Short: "Timer and delayed messages waiting for their time: list, cancel"}
	a.flags(cmd)
	var out, topic string
	var limit int
	cmd.PersistentFlags().StringVarP(&out, "output", "o", "table", "table, json or yaml")
	list := &cobra.Command{Use: "list", Short: "Pending timer and delayed messages, the earliest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{"limit": {strconv.Itoa(limit)}}
			if topic != "" {
				q.Set("topic", topic)
			}
			var p apiv1.PendingTimers
			if err := a.call(cmd, "GET", "/api/v1/timers?"+q.Encode(), nil, &p); err != nil {
				return err
			}
			if done, err := output(cmd, out, p); done {
				return err
			}
			var rows [][]string
			for _, t := range p.Timers {
				kind := "timer"
				if t.DelayLevel > 0 {
					kind = "delay level " + strconv.Itoa(t.DelayLevel)
				}
				rows = append(rows, []string{t.Due, t.Topic, t.ID, kind, t.Tags, t.Keys, strconv.Itoa(t.Size)})
			}
			if err := table(cmd, "DUE\tTOPIC\tID\tKIND\tTAGS\tKEYS\tBYTES", rows); err != nil {
				return err
			}
			if p.More {
				fmt.Fprintf(cmd.OutOrStdout(), "(the first %d shown; more are pending)\n", len(p.Timers))
			}
			return nil
		}}
	list.Flags().StringVar(&topic, "topic", "", "only those for this topic")
	list.Flags().IntVar(&limit, "limit", 100, "at most this many (1..1000)")
	cancel := &cobra.Command{Use: "cancel ID", Short: "Cancel a pending timer or delayed message (by its message id, as listed)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if topic == "" {
				return &usageError{msg: "--topic names the message's topic"}
			}
			q := url.Values{"topic": {topic}}
			if err := a.call(cmd, "DELETE", "/api/v1/timers/"+url.PathEscape(args[0])+"?"+q.Encode(), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cancelled %s\n", args[0])
			return nil
		}}
	cancel.Flags().StringVar(&topic, "topic", "", "the message's topic (required)")
	cmd.AddCommand(list, cancel)
	return cmd
}
