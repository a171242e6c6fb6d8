package main

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rosettamq/rosetta/internal/apiv1"
)

// The operations commands are thin clients of the admin API v1: tables by
// default, -o json or -o yaml for scripts; exit status 0, 1 (failed), 2
// (used wrongly) or 3 (no such topic, group or queue).

func topicPath(name string) string { return "/api/v1/topics/" + url.PathEscape(name) }

func topicCmd() *cobra.Command {
	a := &adminClient{}
	cmd := &cobra.Command{Use: "topic", Short: "List, describe, create and delete topics"}
	a.flags(cmd)
	var out string
	cmd.PersistentFlags().StringVarP(&out, "output", "o", "table", "table, json or yaml")
	var internal bool
	list := &cobra.Command{Use: "list", Short: "Topics with their queues, messages held, bytes and retention", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var ts []apiv1.TopicSummary
			if err := a.call(cmd, "GET", "/api/v1/topics?internal="+strconv.FormatBool(internal), nil, &ts); err != nil {
				return err
			}
			if done, err := output(cmd, out, ts); done {
				return err
			}
			var rows [][]string
			for _, t := range ts {
				rows = append(rows, []string{t.Name, strconv.Itoa(t.Queues), strconv.FormatInt(t.Messages, 10), humanBytes(t.Bytes), humanMs(t.RetentionMs)})
			}
			return table(cmd, "TOPIC\tQUEUES\tMESSAGES\tBYTES\tRETENTION", rows)
		}}
	list.Flags().BoolVar(&internal, "internal", false, "include the broker's internal topics")
	describe := &cobra.Command{Use: "describe TOPIC", Short: "A topic's queues (start, end, bytes) and configuration", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var d apiv1.TopicDetail
			if err := a.call(cmd, "GET", topicPath(args[0]), nil, &d); err != nil {
				return err
			}
			if done, err := output(cmd, out, d); done {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "topic %s (%s), id %s, created %s\n", d.Name, d.FullName, d.ID, time.UnixMilli(d.CreatedMs).UTC().Format(time.RFC3339))
			fmt.Fprintf(w, "%d queues, %d messages, %s, retention %s", d.Queues, d.Messages, humanBytes(d.Bytes), humanMs(d.RetentionMs))
			if d.RetentionBytes >= 0 {
				fmt.Fprintf(w, " or %s per queue", humanBytes(d.RetentionBytes))
			}
			fmt.Fprintln(w)
			if d.Config.CleanupPolicy != "" || d.Config.MessageType != "" {
				fmt.Fprintf(w, "cleanup policy %q, message type %q\n", d.Config.CleanupPolicy, d.Config.MessageType)
			}
			fmt.Fprintln(w)
			var rows [][]string
			for _, q := range d.QueueList {
				rows = append(rows, []string{strconv.Itoa(int(q.Queue)), strconv.Itoa(q.Group), strconv.FormatInt(q.Start, 10), strconv.FormatInt(q.End, 10),
					strconv.FormatInt(q.End-q.Start, 10), humanBytes(q.Bytes)})
			}
			return table(cmd, "QUEUE\tGROUP\tSTART\tEND\tMESSAGES\tBYTES", rows)
		}}
	var queues int
	var cfg apiv1.TopicConfig
	create := &cobra.Command{Use: "create TOPIC", Short: "Create a topic", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var d apiv1.TopicDetail
			if err := a.call(cmd, "POST", "/api/v1/topics", map[string]any{"name": args[0], "queues": queues, "config": cfg}, &d); err != nil {
				return err
			}
			if done, err := output(cmd, out, d); done {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created %s with %d queues\n", d.Name, d.Queues)
			return nil
		}}
	create.Flags().IntVar(&queues, "queues", 0, "queues (Kafka partitions); 0: the broker's default")
	create.Flags().Int64Var(&cfg.RetentionMs, "retention-ms", 0, "how long messages are kept (-1: forever; 0: the broker's default)")
	create.Flags().Int64Var(&cfg.RetentionBytes, "retention-bytes", 0, "most bytes a queue keeps (-1: unlimited; 0: the broker's default)")
	create.Flags().StringVar(&cfg.CleanupPolicy, "cleanup-policy", "", "delete or compact")
	create.Flags().StringVar(&cfg.MessageType, "message-type", "", "normal, fifo, delay, transaction or mixed (RocketMQ 5 topic types)")
	create.Flags().BoolVar(&cfg.MessageTrace, "message-trace", false, "record its messages' lifecycles (rosetta message trace)")
	create.Flags().BoolVar(&cfg.NoTiering, "no-tiering", false, "keep its messages on the members' disks, never in the tiered-storage bucket")
	create.Flags().IntVar(&cfg.ReplicationFactor, "replication-factor", 0, "copies of each queue in a cluster: 1, 3 or 5 (0: the cluster's)")
	alter := &cobra.Command{Use: "alter TOPIC", Short: "Change a topic's settings (those given) or grow its queues", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := map[string]any{}
			for flag, key := range map[string]string{"queues": "queues", "retention-ms": "retention_ms", "retention-bytes": "retention_bytes",
				"cleanup-policy": "cleanup_policy", "message-type": "message_type", "message-trace": "message_trace", "no-tiering": "no_tiering"} {
				if f := cmd.Flags().Lookup(flag); f.Changed {
					switch flag {
					case "queues":
						req[key] = queues
					case "retention-ms":
						req[key] = cfg.RetentionMs
					case "retention-bytes":
						req[key] = cfg.RetentionBytes
					case "cleanup-policy":
						req[key] = cfg.CleanupPolicy
					case "message-type":
						req[key] = cfg.MessageType
					case "message-trace":
						req[key] = cfg.MessageTrace
					case "no-tiering":
						req[key] = cfg.NoTiering
					}
				}
			}
			if len(req) == 0 {
				return &usageError{msg: "name a setting to change, e.g. --queues 16 or --message-trace"}
			}
			var d apiv1.TopicDetail
			if err := a.call(cmd, "PATCH", topicPath(args[0]), req, &d); err != nil {
				return err
			}
			if done, err := output(cmd, out, d); done {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "altered %s: %d queues, message trace %v\n", d.Name, d.Queues, d.Config.MessageTrace)
			return nil
		}}
	alter.Flags().IntVar(&queues, "queues", 0, "grow to this many queues")
	alter.Flags().Int64Var(&cfg.RetentionMs, "retention-ms", 0, "how long messages are kept (-1: forever; 0: the broker's default)")
	alter.Flags().Int64Var(&cfg.RetentionBytes, "retention-bytes", 0, "most bytes a queue keeps (-1: unlimited; 0: the broker's default)")
	alter.Flags().StringVar(&cfg.CleanupPolicy, "cleanup-policy", "", "delete or compact")
	alter.Flags().StringVar(&cfg.MessageType, "message-type", "", "normal, fifo, delay, transaction or mixed")
	alter.Flags().BoolVar(&cfg.MessageTrace, "message-trace", false, "record its messages' lifecycles (--message-trace=false: stop)")
	alter.Flags().BoolVar(&cfg.NoTiering, "no-tiering", false, "keep its messages out of the bucket from now on (--no-tiering=false: tier them again)")
	del := &cobra.Command{Use: "delete TOPIC", Short: "Delete a topic and its messages", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.call(cmd, "DELETE", topicPath(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %s\n", args[0])
			return nil
		}}
	var moveQueue, toGroup int
	move := &cobra.Command{Use: "move TOPIC --queue N --to-group G", Short: "Move a queue to another replication group (its history stays where it is; it goes on there from its end)",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if moveQueue < 0 || toGroup < 0 {
				return fmt.Errorf("want --queue and --to-group, e.g. --queue 3 --to-group 4")
			}
			var done apiv1.QueueMove
			if err := a.call(cmd, "POST", topicPath(args[0])+"/queues/"+strconv.Itoa(moveQueue)+"/move", map[string]any{"to_group": toGroup}, &done); err != nil {
				return err
			}
			if ok, err := output(cmd, out, done); ok {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "moved %s queue %d from group %d to group %d: it goes on there from offset %d (%d ms)\n",
				done.Topic, done.Queue, done.FromGroup, done.ToGroup, done.FromOffset, done.Millis)
			return nil
		}}
	move.Flags().IntVar(&moveQueue, "queue", -1, "the queue (Kafka partition) to move")
	move.Flags().IntVar(&toGroup, "to-group", -1, "the replication group it goes to")
	cmd.AddCommand(list, describe, create, alter, del, move)
	return cmd
}

func groupCmd() *cobra.Command {
	a := &adminClient{}
	cmd := &cobra.Command{Use: "group", Short: "Consumer groups (every protocol's committed offsets): list, lag, reset, delete"}
	a.flags(cmd)
	var out string
	cmd.PersistentFlags().StringVarP(&out, "output", "o", "table", "table, json or yaml")
	list := &cobra.Command{Use: "list", Short: "Groups with committed offsets or live members, and their total lag", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var gs []apiv1.GroupSummary
			if err := a.call(cmd, "GET", "/api/v1/groups", nil, &gs); err != nil {
				return err
			}
			if done, err := output(cmd, out, gs); done {
				return err
			}
			var rows [][]string
			for _, g := range gs {
				rows = append(rows, []string{g.Name, g.State, strconv.Itoa(g.Members), strconv.Itoa(g.Topics), strconv.FormatInt(g.Lag, 10)})
			}
			return table(cmd, "GROUP\tSTATE\tMEMBERS\tTOPICS\tLAG", rows)
		}}
	lag := func(use, short string) *cobra.Command {
		return &cobra.Command{Use: use + " GROUP", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				var d apiv1.GroupDetail
				if err := a.call(cmd, "GET", "/api/v1/groups/"+url.PathEscape(args[0]), nil, &d); err != nil {
					return err
				}
				if done, err := output(cmd, out, d); done {
					return err
				}
				var rows [][]string
				for _, o := range d.Offsets {
					rows = append(rows, []string{o.Topic, strconv.Itoa(int(o.Queue)), strconv.FormatInt(o.Committed, 10),
						strconv.FormatInt(o.End, 10), strconv.FormatInt(o.Lag, 10)})
				}
				if err := table(cmd, "TOPIC\tQUEUE\tCOMMITTED\tEND\tLAG", rows); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "total lag %d\n", d.Lag)
				if use == "describe" {
					return printMembers(cmd, d)
				}
				return nil
			}}
	}
	var req apiv1.OffsetReset
	var toTime, queuesFlag string
	var toOffset int64
	reset := &cobra.Command{Use: "reset GROUP", Short: "Move a group's committed offsets (stop its consumers first)", Args: cobra.ExactArgs(1),
		Long: `Move a group's committed offsets, for every topic it has offsets in or the
one named by --topic: to the earliest or latest offsets (--to), to the first
message stored at or after a time (--to-time), or to an offset (--to-offset,
clamped to what each queue holds). --dry-run shows the moves without making
them. Stop the group's consumers first: a running member commits its own
position over the reset.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case toTime != "":
				t, err := time.Parse(time.RFC3339, toTime)
				if err != nil {
					return &usageError{msg: "--to-time wants an RFC 3339 time, e.g. 2026-12-01T08:00:00Z"}
				}
				req.To, req.TimeMs = "time", t.UnixMilli()
			case cmd.Flags().Changed("to-offset"):
				req.To, req.Offset = "offset", toOffset
			case req.To != "earliest" && req.To != "latest":
				return &usageError{msg: "say where to: --to earliest|latest, --to-time or --to-offset"}
			}
			req.Queues = nil
			for _, s := range strings.Split(queuesFlag, ",") {
				if s = strings.TrimSpace(s); s == "" {
					continue
				}
				q, err := strconv.Atoi(s)
				if err != nil {
					return &usageError{msg: "--queues wants queue numbers, e.g. 0,2"}
				}
				req.Queues = append(req.Queues, int32(q))
			}
			var moves []apiv1.OffsetMove
			if err := a.call(cmd, "POST", "/api/v1/groups/"+url.PathEscape(args[0])+"/reset", req, &moves); err != nil {
				return err
			}
			if done, err := output(cmd, out, moves); done {
				return err
			}
			var rows [][]string
			for _, m := range moves {
				from := strconv.FormatInt(m.From, 10)
				if m.From < 0 {
					from = "-"
				}
				rows = append(rows, []string{m.Topic, strconv.Itoa(int(m.Queue)), from, strconv.FormatInt(m.To, 10)})
			}
			if err := table(cmd, "TOPIC\tQUEUE\tFROM\tTO", rows); err != nil {
				return err
			}
			if req.DryRun {
				fmt.Fprintln(cmd.OutOrStdout(), "dry run: nothing moved")
			}
			return nil
		}}
	reset.Flags().StringVar(&req.To, "to", "", "earliest or latest")
	reset.Flags().StringVar(&toTime, "to-time", "", "the first message stored at or after this RFC 3339 time")
	reset.Flags().Int64Var(&toOffset, "to-offset", 0, "this offset in every queue reset")
	reset.Flags().StringVar(&req.Topic, "topic", "", "only this topic (default: every topic the group has offsets in)")
	reset.Flags().StringVar(&queuesFlag, "queues", "", "only these queues, e.g. 0,2")
	reset.Flags().BoolVar(&req.DryRun, "dry-run", false, "show the moves without making them")
	del := &cobra.Command{Use: "delete GROUP", Short: "Forget a group's committed offsets", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.call(cmd, "DELETE", "/api/v1/groups/"+url.PathEscape(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %s\n", args[0])
			return nil
		}}
	cmd.AddCommand(list, lag("describe", "A group's committed offsets, ends and lag per queue, and its live members"),
		lag("lag", "Lag per queue and in total"), reset, del)
	return cmd
}

// printMembers prints a group's live members: Kafka members with their
// assignment, RocketMQ consumers with their subscriptions.
func printMembers(cmd *cobra.Command, d apiv1.GroupDetail) error {
	w := cmd.OutOrStdout()
	switch d.Type {
	case "consumer":
		fmt.Fprintf(w, "\nKIP-848 consumer group, %s, epoch %d\n", d.State, d.Generation)
	case "classic":
		fmt.Fprintf(w, "\nclassic group, %s, generation %d\n", d.State, d.Generation)
	case "share":
		fmt.Fprintf(w, "\nshare group (KIP-932), %s, epoch %d\n", d.State, d.Generation)
	default:
		fmt.Fprintln(w)
	}
	var rows [][]string
	for _, m := range d.Members {
		var assigned []string
		for _, a := range m.Assignment {
			qs := make([]string, len(a.Queues))
			for i, q := range a.Queues {
				qs[i] = strconv.Itoa(int(q))
			}
			assigned = append(assigned, a.Topic+" "+strings.Join(qs, ","))
		}
		rows = append(rows, []string{m.Protocol, m.ClientID, m.Host, m.MemberID, strings.Join(m.Subscriptions, "; "), strings.Join(assigned, "; ")})
	}
	return table(cmd, "PROTOCOL\tCLIENT\tHOST\tMEMBER\tSUBSCRIPTIONS\tASSIGNMENT", rows)
}

func messageCmd() *cobra.Command {
	a := &adminClient{}
	cmd := &cobra.Command{Use: "message", Short: "Browse, tail and find messages"}
	a.flags(cmd)
	var out string
	cmd.PersistentFlags().StringVarP(&out, "output", "o", "table", "table, json or yaml")
	var queue int
	var offset, limit int64
	var at string
	var newest, follow bool
	query := func(from int64, useFrom bool) (string, error) {
		q := url.Values{"queue": {strconv.Itoa(queue)}, "limit": {strconv.FormatInt(limit, 10)}}
		switch {
		case useFrom:
			q.Set("offset", strconv.FormatInt(from, 10))
		case at != "":
			t, err := time.Parse(time.RFC3339, at)
			if err != nil {
				return "", &usageError{msg: "--time wants an RFC 3339 time"}
			}
			q.Set("time_ms", strconv.FormatInt(t.UnixMilli(), 10))
		case newest:
			q.Set("from", "newest")
		}
		return q.Encode(), nil
	}
	printPage := func(cmd *cobra.Command, msgs []apiv1.MessageView, header bool) error {
		if done, err := output(cmd, out, msgs); done {
			return err
		}
		var rows [][]string
		for _, m := range msgs {
			body := m.Body
			if m.BodyEncoding != "text" {
				body = "base64:" + body
			}
			if len(body) > 80 {
				body = body[:77] + "..."
			}
			rows = append(rows, []string{m.Topic, strconv.Itoa(int(m.Queue)), strconv.FormatInt(m.Offset, 10),
				time.UnixMilli(m.StoreTimeMs).UTC().Format("2006-01-02T15:04:05.000Z"), m.Key, m.Tags, body})
		}
		if !header {
			return table(cmd, "", rows)
		}
		return table(cmd, "TOPIC\tQUEUE\tOFFSET\tSTORED\tKEY\tTAGS\tBODY", rows)
	}
	browse := &cobra.Command{Use: "browse TOPIC", Short: "A page of a queue's messages (oldest first, or from --offset, --time or --newest)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := query(offset, cmd.Flags().Changed("offset"))
			if err != nil {
				return err
			}
			var page apiv1.MessagePage
			if err := a.call(cmd, "GET", topicPath(args[0])+"/messages?"+q, nil, &page); err != nil {
				return err
			}
			if out == "table" || out == "" {
				if err := printPage(cmd, page.Messages, true); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "next offset %d of %d\n", page.NextOffset, page.End)
				return nil
			}
			_, err = output(cmd, out, page)
			return err
		}}
	tail := &cobra.Command{Use: "tail TOPIC", Short: "The newest messages of a queue; with -f, new ones as they arrive", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			newest = true
			q, err := query(0, false)
			if err != nil {
				return err
			}
			var page apiv1.MessagePage
			if err := a.call(cmd, "GET", topicPath(args[0])+"/messages?"+q, nil, &page); err != nil {
				return err
			}
			if err := printPage(cmd, page.Messages, true); err != nil || !follow {
				return err
			}
			next := page.NextOffset
			for {
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(500 * time.Millisecond):
				}
				q, _ := query(next, true)
				if err := a.call(cmd, "GET", topicPath(args[0])+"/messages?"+q, nil, &page); err != nil {
					if cmd.Context().Err() != nil {
						return nil
					}
					return err
				}
				if len(page.Messages) > 0 {
					if err := printPage(cmd, page.Messages, false); err != nil {
						return err
					}
				}
				next = page.NextOffset
			}
		}}
	tail.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new messages until interrupted")
	for _, c := range []*cobra.Command{browse, tail} {
		c.Flags().IntVar(&queue, "queue", 0, "queue (Kafka partition, RocketMQ queue id)")
		c.Flags().Int64Var(&limit, "limit", 20, "messages per page (1..500)")
	}
	browse.Flags().Int64Var(&offset, "offset", 0, "start at this offset")
	browse.Flags().StringVar(&at, "time", "", "start at the first message stored at or after this RFC 3339 time")
	browse.Flags().BoolVar(&newest, "newest", false, "the last --limit messages")
	var key, topic string
	search := &cobra.Command{Use: "search", Short: "Find messages by key: RocketMQ KEYS or message id, indexed Kafka keys", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if key == "" {
				return &usageError{msg: "--key is required"}
			}
			q := url.Values{"key": {key}, "limit": {strconv.FormatInt(limit, 10)}}
			if topic != "" {
				q.Set("topic", topic)
			}
			var msgs []apiv1.MessageView
			if err := a.call(cmd, "GET", "/api/v1/messages?"+q.Encode(), nil, &msgs); err != nil {
				return err
			}
			if len(msgs) == 0 && (out == "table" || out == "") {
				return &apiError{Status: 404, Code: "not_found", Message: "no message with key " + key}
			}
			return printPage(cmd, msgs, true)
		}}
	search.Flags().StringVar(&key, "key", "", "the key or message id")
	search.Flags().StringVar(&topic, "topic", "", "only in this topic")
	search.Flags().Int64Var(&limit, "limit", 32, "at most this many")
	var send apiv1.MessageSend
	var sendQueue int32
	var headers []string
	sendCmd := &cobra.Command{Use: "send TOPIC", Short: "Produce a message (body from --body, or standard input)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("body") {
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<20))
				if err != nil {
					return err
				}
				send.Body = string(b)
			}
			send.Headers = nil
			for _, h := range headers {
				k, v, ok := strings.Cut(h, "=")
				if !ok {
					return &usageError{msg: "--header wants key=value"}
				}
				send.Headers = append(send.Headers, apiv1.HeaderView{Key: k, Value: v})
			}
			send.Queue = nil
			if cmd.Flags().Changed("queue") {
				send.Queue = &sendQueue
			}
			var res apiv1.MessageSent
			if err := a.call(cmd, "POST", topicPath(args[0])+"/messages", send, &res); err != nil {
				return err
			}
			if done, err := output(cmd, out, res); done {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stored in %s queue %d at offset %d\n", res.Topic, res.Queue, res.Offset)
			return nil
		}}
	sendCmd.Flags().StringVar(&send.Body, "body", "", "the body (default: standard input)")
	sendCmd.Flags().StringVar(&send.Key, "key", "", "the key (Kafka record key; RocketMQ KEYS)")
	sendCmd.Flags().StringVar(&send.Tags, "tags", "", "RocketMQ tags")
	sendCmd.Flags().StringArrayVar(&headers, "header", nil, "a header or property, key=value (repeatable)")
	sendCmd.Flags().Int32Var(&sendQueue, "queue", 0, "the queue (default: by key, else 0)")
	cmd.AddCommand(browse, tail, search, sendCmd, messageTraceCmd(a, &out))
	return cmd
}

func dlqCmd() *cobra.Command {
	a := &adminClient{}
	cmd := &cobra.Command{Use: "dlq", Short: "Dead letters (%DLQ%<group>): list, browse, re-drive"}
	a.flags(cmd)
	var out string
	cmd.PersistentFlags().StringVarP(&out, "output", "o", "table", "table, json or yaml")
	list := &cobra.Command{Use: "list", Short: "Groups with dead letters", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var ds []apiv1.DeadLetterSummary
			if err := a.call(cmd, "GET", "/api/v1/deadletters", nil, &ds); err != nil {
				return err
			}
			if done, err := output(cmd, out, ds); done {
				return err
			}
			var rows [][]string
			for _, d := range ds {
				rows = append(rows, []string{d.Group, strconv.FormatInt(d.Messages, 10), strconv.FormatInt(d.Start, 10),
					strconv.FormatInt(d.End, 10), humanBytes(d.Bytes)})
			}
			return table(cmd, "GROUP\tMESSAGES\tSTART\tEND\tBYTES", rows)
		}}
	var offset, limit int64
	browse := &cobra.Command{Use: "browse GROUP", Short: "A page of a group's dead letters with their origin topics", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := url.Values{"offset": {strconv.FormatInt(offset, 10)}, "limit": {strconv.FormatInt(limit, 10)}}
			var page apiv1.MessagePage
			if err := a.call(cmd, "GET", "/api/v1/deadletters/"+url.PathEscape(args[0])+"/messages?"+q.Encode(), nil, &page); err != nil {
				return err
			}
			if done, err := output(cmd, out, page); done {
				return err
			}
			var rows [][]string
			for _, m := range page.Messages {
				body := m.Body
				if len(body) > 60 {
					body = body[:57] + "..."
				}
				rows = append(rows, []string{strconv.FormatInt(m.Offset, 10), m.Origin,
					time.UnixMilli(m.StoreTimeMs).UTC().Format("2006-01-02T15:04:05Z"), m.Key, body})
			}
			if err := table(cmd, "OFFSET\tORIGIN\tDEAD SINCE\tKEY\tBODY", rows); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "next offset %d of %d\n", page.NextOffset, page.End)
			return nil
		}}
	browse.Flags().Int64Var(&offset, "offset", 0, "start at this offset")
	browse.Flags().Int64Var(&limit, "limit", 20, "messages per page (1..500)")
	var req apiv1.Redrive
	var offsets string
	redrive := &cobra.Command{Use: "redrive GROUP", Short: "Send dead letters back to their origin topic (or --to-retry: the group's retry topic)", Args: cobra.ExactArgs(1),
		Long: `Send a group's dead letters back for another round: those at --offsets, or
the range --from..--to (every one by default), to the topic each was consumed
from — every group subscribed there gets it again — or with --to-retry to the
group's retry topic, so only that group does. Keys, tags and properties are
kept and the retry count starts again. The dead-letter topic is a log: the
messages stay in it, and the answer says where the next range starts.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Offsets = nil
			for _, s := range strings.Split(offsets, ",") {
				if s = strings.TrimSpace(s); s == "" {
					continue
				}
				o, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return &usageError{msg: "--offsets wants offsets, e.g. 0,5,9"}
				}
				req.Offsets = append(req.Offsets, o)
			}
			var res apiv1.RedriveResult
			if err := a.call(cmd, "POST", "/api/v1/deadletters/"+url.PathEscape(args[0])+"/redrive", req, &res); err != nil {
				return err
			}
			if done, err := output(cmd, out, res); done {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "re-drove %d; skipped %d (origin unknown or gone); next offset %d\n", res.Redriven, len(res.Skipped), res.Next)
			return nil
		}}
	redrive.Flags().StringVar(&offsets, "offsets", "", "these dead-letter offsets, e.g. 0,5,9")
	redrive.Flags().Int64Var(&req.From, "from", 0, "the first offset of the range")
	redrive.Flags().Int64Var(&req.To, "to", 0, "the offset after the range (0: the end)")
	redrive.Flags().IntVar(&req.Max, "max", 0, "at most this many (0: 10,000)")
	redrive.Flags().BoolVar(&req.ToRetry, "to-retry", false, "to the group's retry topic instead of the origin topic")
	cmd.AddCommand(list, browse, redrive)
	return cmd
}

func txnCmd() *cobra.Command {
	a := &adminClient{}
	cmd := &cobra.Command{Use: "txn", Short: "Transactions in doubt: open Kafka transactions, pending RocketMQ half messages"}
	a.flags(cmd)
	var out string
	cmd.PersistentFlags().StringVarP(&out, "output", "o", "table", "table, json or yaml")
	list := &cobra.Command{Use: "list", Short: "Kafka transactions open or completing, RocketMQ half messages waiting", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var tx apiv1.Transactions
			if err := a.call(cmd, "GET", "/api/v1/transactions", nil, &tx); err != nil {
				return err
			}
			if done, err := output(cmd, out, tx); done {
				return err
			}
			var rows [][]string
			for _, k := range tx.Kafka {
				var parts []string
				for _, p := range k.Partitions {
					parts = append(parts, p.Topic+"-"+strconv.Itoa(int(p.Partition)))
				}
				rows = append(rows, []string{k.ID, k.State, strconv.FormatInt(k.ProducerID, 10), strconv.Itoa(int(k.Epoch)),
					time.UnixMilli(k.StartMs).UTC().Format(time.RFC3339), strings.Join(parts, ",")})
			}
			fmt.Fprintln(cmd.OutOrStdout(), "Kafka transactions")
			if err := table(cmd, "TRANSACTIONAL ID\tSTATE\tPRODUCER ID\tEPOCH\tSTARTED\tPARTITIONS", rows); err != nil {
				return err
			}
			rows = nil
			for _, h := range tx.RocketMQ {
				rows = append(rows, []string{strconv.FormatInt(h.Offset, 10), h.Group, h.Topic, h.MessageID,
					time.UnixMilli(h.StoredMs).UTC().Format(time.RFC3339), strconv.Itoa(h.Checks)})
			}
			fmt.Fprintln(cmd.OutOrStdout(), "\nRocketMQ half messages")
			return table(cmd, "OFFSET\tPRODUCER GROUP\tTOPIC\tMESSAGE ID\tSTORED\tCHECKS", rows)
		}}
	abort := &cobra.Command{Use: "abort TRANSACTIONAL-ID", Short: "Abort a Kafka transaction now (its producer is fenced)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.call(cmd, "POST", "/api/v1/transactions/kafka/"+url.PathEscape(args[0])+"/abort", nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "aborted %s\n", args[0])
			return nil
		}}
	end := func(action, short string) *cobra.Command {
		return &cobra.Command{Use: action + " OFFSET", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if _, err := strconv.ParseInt(args[0], 10, 64); err != nil {
					return &usageError{msg: "OFFSET is the half message's offset, as txn list shows it"}
				}
				var sent apiv1.MessageSent
				if err := a.call(cmd, "POST", "/api/v1/transactions/rocketmq/"+args[0]+"/"+action, nil, &sent); err != nil {
					return err
				}
				if action == "commit" {
					fmt.Fprintf(cmd.OutOrStdout(), "committed: stored in %s queue %d at offset %d\n", sent.Topic, sent.Queue, sent.Offset)
				} else {
					fmt.Fprintln(cmd.OutOrStdout(), "rolled back")
				}
				return nil
			}}
	}
	cmd.AddCommand(list, abort, end("commit", "Commit a RocketMQ half message for its producer"),
		end("rollback", "Roll back a RocketMQ half message for its producer"))
	return cmd
}
