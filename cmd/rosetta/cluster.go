package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// clusterView is the part of GET /api/v1/cluster the status table shows.
type clusterView struct {
	ClusterID string `json:"cluster_id"`
	Name      string `json:"name"`
	Metadata  string `json:"metadata"`
	Self      int32  `json:"self"`
	Nodes     []struct {
		ID          int32             `json:"id"`
		Incarnation int64             `json:"incarnation"`
		Endpoints   map[string]string `json:"endpoints"`
		Started     time.Time         `json:"started"`
		Role        string            `json:"role"`
	} `json:"nodes"`
	Groups []struct {
		ID           int     `json:"id"`
		Leader       int32   `json:"leader"`
		Term         uint64  `json:"term"`
		Role         string  `json:"role"`
		FirstIndex   uint64  `json:"first_index"`
		LastIndex    uint64  `json:"last_index"`
		DurableIndex uint64  `json:"durable_index"`
		CommitIndex  uint64  `json:"commit_index"`
		Replicas     []int32 `json:"replicas"`
		Learners     []int32 `json:"learners"`
		Factor       int     `json:"replication_factor"`
		Progress     []struct {
			Node  int32  `json:"node"`
			Match uint64 `json:"match"`
			Lag   uint64 `json:"lag"`
			State string `json:"state"`
		} `json:"progress"`
	} `json:"groups"`
}

func clusterCmd() *cobra.Command {
	a := &adminClient{}
	cmd := &cobra.Command{Use: "cluster", Aliases: []string{"node"}, Short: "Show the node and the cluster it belongs to (also: rosetta node status)"}
	a.flags(cmd)
	var output string
	status := &cobra.Command{Use: "status", Short: "Nodes, replication groups, leaders, terms and log indexes", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var buf bytes.Buffer
			cmd.SetOut(&buf)
			if err := a.do(cmd, "GET", "/api/v1/cluster", nil); err != nil {
				return err
			}
			cmd.SetOut(nil)
			if output == "json" {
				_, err := io.Copy(cmd.OutOrStdout(), &buf)
				return err
			}
			var v clusterView
			if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
				return fmt.Errorf("cluster status: %w", err)
			}
			printCluster(cmd.OutOrStdout(), v)
			return nil
		}}
	status.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	member := &cobra.Command{Use: "member", Short: "Add a member to the cluster or remove one"}
	add := &cobra.Command{Use: "add <id>=<host>", Short: "Add a member (then start it with an empty data directory)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			idStr, host, ok := strings.Cut(args[0], "=")
			id, err := strconv.Atoi(idStr)
			if !ok || err != nil || id <= 0 || host == "" {
				return fmt.Errorf("want <id>=<host>, e.g. 4=127.0.0.14")
			}
			return a.do(cmd, "POST", "/api/v1/cluster/members", map[string]any{"node": id, "host": host})
		}}
	remove := &cobra.Command{Use: "remove <id>", Short: "Remove a member (its groups go on without it; stop it afterwards)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.Atoi(args[0])
			if err != nil || id <= 0 {
				return fmt.Errorf("want a node id")
			}
			return a.do(cmd, "DELETE", "/api/v1/cluster/members/"+args[0], nil)
		}}
	member.AddCommand(add, remove)
	leader := &cobra.Command{Use: "leader", Short: "Move a replication group's leadership"}
	move := &cobra.Command{Use: "move <group> <member id>", Short: "Hand a group's leadership to a member holding a replica of it", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, gerr := strconv.Atoi(args[0])
			id, err := strconv.Atoi(args[1])
			if gerr != nil || err != nil || g < 0 || id <= 0 {
				return fmt.Errorf("want a group number and a member id, e.g. 1 3")
			}
			return a.do(cmd, "POST", "/api/v1/cluster/groups/"+args[0]+"/leader", map[string]any{"node": id})
		}}
	leader.AddCommand(move)
	groups := &cobra.Command{Use: "groups", Short: "Add replication groups to the running cluster"}
	var factor int
	addGroups := &cobra.Command{Use: "add <count>", Short: "Add replication groups (their leaders spread over the members; new topics and partitions spread over them)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[0])
			if err != nil || n <= 0 {
				return fmt.Errorf("want a number of groups, e.g. 3")
			}
			return a.do(cmd, "POST", "/api/v1/cluster/groups", map[string]any{"count": n, "replication_factor": factor})
		}}
	addGroups.Flags().IntVar(&factor, "replication-factor", 0, "voters of each new group: 1, 3 or 5 (0: the cluster's)")
	groups.AddCommand(addGroups)
	cmd.AddCommand(status, member, leader, groups)
	return cmd
}

func printCluster(w io.Writer, v clusterView) {
	name := v.Name
	if name == "" {
		name = "(single node)"
	}
	fmt.Fprintf(w, "cluster %s  id %s  metadata %s  this node %d\n\n", name, v.ClusterID, v.Metadata, v.Self)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tINCARNATION\tSTARTED\tENDPOINTS")
	for _, n := range v.Nodes {
		var eps []string
		for k, e := range n.Endpoints {
			eps = append(eps, k+"="+e)
		}
		sort.Strings(eps)
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", n.ID, n.Role, n.Incarnation, n.Started.Format(time.RFC3339), strings.Join(eps, " "))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tFACTOR\tLEADER\tTERM\tTHIS NODE\tFIRST INDEX\tLAST INDEX\tDURABLE\tCOMMITTED\tREPLICAS\tLEARNERS")
	for _, g := range v.Groups {
		learners := "-"
		if len(g.Learners) > 0 {
			learners = fmt.Sprint(g.Learners)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%v\t%s\n", g.ID, g.Factor, g.Leader, g.Term, g.Role, g.FirstIndex, g.LastIndex, g.DurableIndex, g.CommitIndex, g.Replicas, learners)
	}
	_ = tw.Flush()
	for _, g := range v.Groups {
		if len(g.Progress) == 0 {
			continue
		}
		fmt.Fprintf(w, "\ngroup %d replicas (as its leader sees them)\n", g.ID)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tMATCH\tLAG\tSTATE")
		for _, p := range g.Progress {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\n", p.Node, p.Match, p.Lag, p.State)
		}
		_ = tw.Flush()
	}
}
