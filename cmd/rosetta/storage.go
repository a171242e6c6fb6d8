package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/rosettamq/rosetta/internal/apiv1"

	"github.com/spf13/cobra"
)

func storageCmd() *cobra.Command {
	a := &adminClient{}
	cmd := &cobra.Command{Use: "storage", Short: "The storage engine: tiered storage in an object store"}
	a.flags(cmd)
	var out string
	cmd.PersistentFlags().StringVarP(&out, "output", "o", "table", "table, json or yaml")
	tier := &cobra.Command{Use: "tier", Short: "Sealed segments kept in an S3-compatible bucket"}
	var segments bool
	status := &cobra.Command{Use: "status", Short: "What is in the bucket and what is local, the upload lag, cold reads, the last upload error", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var v apiv1.TierReport
			if err := a.call(cmd, "GET", "/api/v1/storage/tier", nil, &v); err != nil {
				return err
			}
			if done, err := output(cmd, out, v); done {
				return err
			}
			st := v.Status
			w := cmd.OutOrStdout()
			if !st.Enabled {
				fmt.Fprintln(w, "tiering: off (storage.tier.bucket is not set)")
				if st.Segments == 0 {
					return nil
				}
			}
			hit := "-"
			if n := st.CacheHits + st.CacheMisses; n > 0 {
				hit = fmt.Sprintf("%.0f%%", 100*float64(st.CacheHits)/float64(n))
			}
			fmt.Fprintf(w, "in the bucket:   %d segments, %s (%d of them still local)\n", st.Segments, humanBytes(st.Bytes), st.LocalSegments)
			fmt.Fprintf(w, "upload lag:      %d segments, %s\n", st.PendingSegments, humanBytes(st.PendingBytes))
			fmt.Fprintf(w, "uploaded:        %d segments, %s, %d failed passes (since start)\n", st.UploadedSegments, humanBytes(st.UploadedBytes), st.UploadErrors)
			fmt.Fprintf(w, "cold reads:      %d requests, %s, cache hits %s\n", st.ColdReads, humanBytes(st.ColdReadBytes), hit)
			if st.LastError != "" {
				fmt.Fprintf(w, "stalled since %s: %s\n", st.LastErrorAt.Format(time.RFC3339), st.LastError)
			}
			if !segments {
				return nil
			}
			var rows [][]string
			for _, s := range v.Segments {
				rows = append(rows, []string{s.Key, strconv.FormatUint(s.Term, 10), fmt.Sprintf("%d..%d", s.FirstIndex, s.LastIndex),
					humanBytes(s.Bytes), strconv.Itoa(s.Queues), strconv.FormatBool(s.Local)})
			}
			fmt.Fprintln(w)
			return table(cmd, "KEY\tTERM\tRECORDS\tBYTES\tQUEUES\tLOCAL", rows)
		}}
	status.Flags().BoolVar(&segments, "segments", false, "list every tiered segment")
	upload := &cobra.Command{Use: "upload", Short: "Upload the sealed segments not tiered yet, now", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var v struct {
				Uploaded int `json:"uploaded_segments"`
			}
			if err := a.call(cmd, "POST", "/api/v1/storage/tier/upload", nil, &v); err != nil {
				return err
			}
			if done, err := output(cmd, out, v); done {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d segments uploaded\n", v.Uploaded)
			return nil
		}}
	tier.AddCommand(status, upload)
	cmd.AddCommand(tier)
	return cmd
}
