package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rosettamq/rosetta/internal/app"
)

// adminClient calls a node's admin API.
type adminClient struct {
	base, user, password string
	insecure             bool
}

func (a *adminClient) flags(cmd *cobra.Command) {
	def := os.Getenv("ROSETTA_ADMIN")
	if def == "" {
		def = "http://127.0.0.1:8080"
	}
	cmd.PersistentFlags().StringVar(&a.base, "admin", def, "admin API base URL (env ROSETTA_ADMIN)")
	cmd.PersistentFlags().StringVar(&a.user, "admin-user", os.Getenv("ROSETTA_ADMIN_USER"), "user for the admin API when authorization is on (env ROSETTA_ADMIN_USER)")
	cmd.PersistentFlags().StringVar(&a.password, "admin-password", os.Getenv("ROSETTA_ADMIN_PASSWORD"), "its password (env ROSETTA_ADMIN_PASSWORD)")
	cmd.PersistentFlags().BoolVar(&a.insecure, "insecure", false, "accept any certificate of an https admin API")
}

// do sends one request and prints the JSON answer, indented.
func (a *adminClient) do(cmd *cobra.Command, method, path string, body any) error {
	var out json.RawMessage
	if err := a.call(cmd, method, path, body, &out); err != nil {
		return err
	}
	if len(out) > 0 {
		var v any
		if json.Unmarshal(out, &v) == nil {
			out, _ = json.MarshalIndent(v, "", "  ")
		}
		fmt.Fprintln(cmd.OutOrStdout(), string(out))
	}
	return nil
}

func userCmd() *cobra.Command {
	a := &adminClient{}
	cmd := &cobra.Command{Use: "user", Short: "Manage users and their credentials (SCRAM for Kafka, the secret key RocketMQ clients sign with)"}
	a.flags(cmd)
	var password, namespace, dataDir string
	var stdin bool
	var iterations int
	set := &cobra.Command{
		Use:   "set NAME",
		Short: "Create a user or change its password or namespace",
		Long: `Create a user or change its password (stored as salted SCRAM-SHA-256 and
SCRAM-SHA-512 keys, plus the encrypted secret key RocketMQ clients sign with)
or the namespace its Kafka short topic names resolve in.

With --data_dir the user is written to a stopped node's data directory
directly (the way to make the first super user before starting a node with
security.authorization on); otherwise through the admin API.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if stdin {
				line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if err != nil && !errors.Is(err, io.EOF) {
					return err
				}
				password = strings.TrimRight(line, "\r\n")
			}
			if dataDir != "" {
				return app.SetUserOffline(cmd.Context(), dataDir, args[0], password, namespace, iterations)
			}
			body := map[string]any{"iterations": iterations}
			if password != "" {
				body["password"] = password
			}
			if cmd.Flags().Changed("namespace") {
				body["namespace"] = namespace
			}
			return a.do(cmd, http.MethodPut, "/api/v1/users/"+url.PathEscape(args[0]), body)
		},
	}
	set.Flags().StringVar(&password, "password", "", "the password (visible to other local users; prefer --password-stdin)")
	set.Flags().BoolVar(&stdin, "password-stdin", false, "read the password from the first line of standard input")
	set.Flags().StringVar(&namespace, "namespace", "", "bind the user to tenant/namespace (empty: unbind)")
	set.Flags().IntVar(&iterations, "iterations", 0, "SCRAM iterations (4096-16384; default 4096)")
	set.Flags().StringVar(&dataDir, "data_dir", "", "write to a stopped node's data directory instead of the admin API")
	cmd.AddCommand(set,
		&cobra.Command{Use: "list", Short: "List users (mechanisms and iterations; never secrets)", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error { return a.do(cmd, http.MethodGet, "/api/v1/users", nil) }},
		&cobra.Command{Use: "delete NAME", Short: "Delete a user and its credentials", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return a.do(cmd, http.MethodDelete, "/api/v1/users/"+url.PathEscape(args[0]), nil)
			}})
	return cmd
}

func aclCmd() *cobra.Command {
	a := &adminClient{}
	cmd := &cobra.Command{Use: "acl", Short: "Manage ACLs (the one store Kafka's ACL APIs and RocketMQ's ACL codes share)"}
	a.flags(cmd)
	var b struct{ principal, host, rtype, name, pattern, op, perm string }
	filterFlags := func(c *cobra.Command) {
		c.Flags().StringVar(&b.principal, "principal", "", "principal, e.g. User:alice (User:* for everyone)")
		c.Flags().StringVar(&b.host, "host", "", "client host (* for any)")
		c.Flags().StringVar(&b.rtype, "resource-type", "", "topic, group, cluster, transactional_id, namespace or tenant")
		c.Flags().StringVar(&b.name, "resource-name", "", "resource name (kafka-cluster for the cluster; tenant/namespace for a namespace)")
		c.Flags().StringVar(&b.pattern, "pattern", "", "literal or prefixed")
		c.Flags().StringVar(&b.op, "operation", "", "read (consume), write (produce), create, delete, alter, describe, describe_configs, alter_configs, idempotent_write, cluster_action or all")
		c.Flags().StringVar(&b.perm, "permission", "", "allow or deny")
	}
	query := func() string {
		q := url.Values{}
		for k, v := range map[string]string{"principal": b.principal, "host": b.host, "resourceType": b.rtype, "resourceName": b.name,
			"patternType": b.pattern, "operation": b.op, "permission": b.perm} {
			if v != "" {
				q.Set(k, v)
			}
		}
		return "?" + q.Encode()
	}
	list := &cobra.Command{Use: "list", Short: "List ACLs matching the filter flags", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.do(cmd, http.MethodGet, "/api/v1/acls"+query(), nil)
		}}
	add := &cobra.Command{Use: "add", Short: "Add an ACL", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if b.pattern == "" {
				b.pattern = "literal"
			}
			if b.perm == "" {
				b.perm = "allow"
			}
			return a.do(cmd, http.MethodPost, "/api/v1/acls", []map[string]string{{"principal": b.principal, "host": b.host,
				"resourceType": b.rtype, "resourceName": b.name, "patternType": b.pattern, "operation": b.op, "permission": b.perm}})
		}}
	del := &cobra.Command{Use: "delete", Short: "Delete the ACLs matching the filter flags", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.do(cmd, http.MethodDelete, "/api/v1/acls"+query(), nil)
		}}
	for _, c := range []*cobra.Command{list, add, del} {
		filterFlags(c)
		cmd.AddCommand(c)
	}
	return cmd
}

func quotaCmd() *cobra.Command {
	a := &adminClient{}
	cmd := &cobra.Command{Use: "quota", Short: "Manage tenant, namespace and user quotas"}
	a.flags(cmd)
	var produce, fetch, storage int64
	var topics, connections int
	set := &cobra.Command{Use: "set tenant|namespace|user NAME", Short: "Set an entity's limits (0: none; users have byte rates only)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.do(cmd, http.MethodPut, "/api/v1/quotas/"+args[0]+"/"+args[1], map[string]any{"produceBytesPerSecond": produce,
				"fetchBytesPerSecond": fetch, "storageBytes": storage, "topics": topics, "connections": connections})
		}}
	set.Flags().Int64Var(&produce, "produce-bytes-per-second", 0, "produce byte rate")
	set.Flags().Int64Var(&fetch, "fetch-bytes-per-second", 0, "fetch byte rate")
	set.Flags().Int64Var(&storage, "storage-bytes", 0, "stored bytes")
	set.Flags().IntVar(&topics, "topics", 0, "topic count")
	set.Flags().IntVar(&connections, "connections", 0, "authenticated connections (of a user, or of the users bound to a namespace or tenant)")
	cmd.AddCommand(set,
		&cobra.Command{Use: "list", Short: "List limits, usage and throttling per tenant and namespace", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error { return a.do(cmd, http.MethodGet, "/api/v1/quotas", nil) }},
		&cobra.Command{Use: "delete tenant|namespace|user NAME", Short: "Remove an entity's limits", Args: cobra.ExactArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				return a.do(cmd, http.MethodDelete, "/api/v1/quotas/"+args[0]+"/"+args[1], nil)
			}})
	return cmd
}
