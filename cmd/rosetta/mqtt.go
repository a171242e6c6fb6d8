package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// mqttSession is a session as /api/v1/mqtt/sessions lists it.
type mqttSession struct {
	ClientID      string `json:"client_id"`
	Connected     bool   `json:"connected"`
	Remote        string `json:"remote,omitempty"`
	Version       int    `json:"protocol_level,omitempty"`
	ExpirySeconds int64  `json:"expiry_seconds"`
	Durable       bool   `json:"durable"`
	Subscriptions []struct {
		Filter string `json:"filter"`
		QoS    byte   `json:"qos"`
		Shared bool   `json:"shared,omitempty"`
	} `json:"subscriptions"`
	InFlight int `json:"in_flight"`
}

// mqttRetained is a retained message as /api/v1/mqtt/retained lists it.
type mqttRetained struct {
	Topic string `json:"topic"`
	Bytes int    `json:"bytes"`
	QoS   byte   `json:"qos"`
}

// mqttCmd shows MQTT sessions and retained messages (the admin API's
// /api/v1/mqtt).
func mqttCmd() *cobra.Command {
	a := &adminClient{}
	cmd := &cobra.Command{Use: "mqtt", Short: "MQTT sessions and retained messages"}
	a.flags(cmd)
	var out string
	cmd.PersistentFlags().StringVarP(&out, "output", "o", "table", "table, json or yaml")
	sessions := &cobra.Command{Use: "sessions", Short: "Sessions, connected or waiting for their clients, with their subscriptions", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var res struct {
				Sessions []mqttSession `json:"sessions"`
			}
			if err := a.call(cmd, "GET", "/api/v1/mqtt/sessions", nil, &res); err != nil {
				return err
			}
			if done, err := output(cmd, out, res); done {
				return err
			}
			var rows [][]string
			for _, s := range res.Sessions {
				state := "waiting"
				if s.Connected {
					state = "connected " + s.Remote
				}
				var subs []string
				for _, sub := range s.Subscriptions {
					subs = append(subs, sub.Filter+" (QoS "+strconv.Itoa(int(sub.QoS))+")")
				}
				rows = append(rows, []string{s.ClientID, state, mqttVersion(s.Version), strconv.FormatInt(s.ExpirySeconds, 10),
					strconv.Itoa(s.InFlight), strings.Join(subs, ", ")})
			}
			return table(cmd, "CLIENT ID\tSTATE\tVERSION\tEXPIRY (S)\tIN FLIGHT\tSUBSCRIPTIONS", rows)
		}}
	retained := &cobra.Command{Use: "retained", Short: "Retained messages: topic, size and QoS", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var res struct {
				Retained []mqttRetained `json:"retained"`
			}
			if err := a.call(cmd, "GET", "/api/v1/mqtt/retained", nil, &res); err != nil {
				return err
			}
			if done, err := output(cmd, out, res); done {
				return err
			}
			var rows [][]string
			for _, r := range res.Retained {
				rows = append(rows, []string{r.Topic, humanBytes(int64(r.Bytes)), strconv.Itoa(int(r.QoS))})
			}
			return table(cmd, "TOPIC\tSIZE\tQOS", rows)
		}}
	cmd.AddCommand(sessions, retained)
	return cmd
}

// mqttVersion names an MQTT protocol level ("" while not connected).
func mqttVersion(level int) string {
	switch level {
	case 3:
		return "3.1"
	case 4:
		return "3.1.1"
	case 5:
		return "5.0"
	case 0:
		return ""
	}
	return fmt.Sprint(level)
}
