package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// apiError is an error answer of the admin API. The command exits with 3
// when the thing asked for does not exist (404), 1 otherwise.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("%d: %s", e.Status, e.Message)
	}
	return e.Code + ": " + e.Message
}

// exitCode is the process exit status for err: 2 for a usage error, 3 for
// something that does not exist, 1 otherwise.
func exitCode(err error) int {
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return 3
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// usageError is a command used wrongly.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// call sends one request to the admin API and decodes its JSON answer into
// out (when out is not nil).
func (a *adminClient) call(cmd *cobra.Command, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(cmd.Context(), method, strings.TrimSuffix(a.base, "/")+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.user != "" {
		req.SetBasicAuth(a.user, a.password)
	}
	hc := &http.Client{Timeout: 60 * time.Second}
	if a.insecure {
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // asked for
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		e := &apiError{Status: resp.StatusCode, Message: strings.TrimSpace(string(data))}
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(data, &body) == nil && body.Error.Code != "" {
			e.Code, e.Message = body.Error.Code, body.Error.Message
		}
		return e
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

// output prints v as JSON or YAML when asked (true), leaving tables to the
// caller (false).
func output(cmd *cobra.Command, format string, v any) (bool, error) {
	w := cmd.OutOrStdout()
	switch format {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return true, err
		}
		_, err = fmt.Fprintln(w, string(b))
		return true, err
	case "yaml":
		// Through JSON, so the field names are the API's.
		b, err := json.Marshal(v)
		if err != nil {
			return true, err
		}
		var generic any
		if err := json.Unmarshal(b, &generic); err != nil {
			return true, err
		}
		y, err := yaml.Marshal(generic)
		if err != nil {
			return true, err
		}
		_, err = w.Write(y)
		return true, err
	case "", "table":
		return false, nil
	}
	return true, &usageError{msg: "output must be table, json or yaml, not " + format}
}

// table writes rows under a header, columns aligned.
func table(cmd *cobra.Command, header string, rows [][]string) error {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	if header != "" {
		fmt.Fprintln(tw, header)
	}
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// humanBytes shows a byte count in binary units.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// humanMs shows a retention in ms (-1: forever).
func humanMs(ms int64) string {
	if ms < 0 {
		return "forever"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}
