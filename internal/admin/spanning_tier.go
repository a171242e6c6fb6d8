package admin

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/rosettamq/rosetta/internal/apiv1"
)

// tier merges every group's tiered storage: the totals summed, the last
// upload error the newest one (named by its group), the segments listed
// with their group.
func (s *spanning) tier(w http.ResponseWriter, r *http.Request) {
	answers, ok := s.all(w, r, sub(r, nil))
	if !ok || failed(w, answers, false) {
		return
	}
	out := apiv1.TierReport{Segments: []apiv1.TierSegment{}}
	for g, a := range answers {
		var rep apiv1.TierReport
		if err := json.Unmarshal(a.Body, &rep); err != nil {
			apiError(w, http.StatusBadGateway, "internal", "replication group "+strconv.Itoa(g)+" answered: "+err.Error())
			return
		}
		st, sum := rep.Status, &out.Status
		sum.Enabled = sum.Enabled || st.Enabled
		sum.Segments += st.Segments
		sum.Bytes += st.Bytes
		sum.LocalSegments += st.LocalSegments
		sum.PendingSegments += st.PendingSegments
		sum.PendingBytes += st.PendingBytes
		sum.UploadedSegments += st.UploadedSegments
		sum.UploadedBytes += st.UploadedBytes
		sum.UploadErrors += st.UploadErrors
		sum.ColdReads += st.ColdReads
		sum.ColdReadBytes += st.ColdReadBytes
		sum.CacheHits += st.CacheHits
		sum.CacheMisses += st.CacheMisses
		if st.LastError != "" && (sum.LastError == "" || st.LastErrorAt.After(sum.LastErrorAt)) {
			sum.LastError, sum.LastErrorAt = "group "+strconv.Itoa(g)+": "+st.LastError, st.LastErrorAt
		}
		for _, seg := range rep.Segments {
			seg.Group = &g
			out.Segments = append(out.Segments, seg)
		}
	}
	if out.Status.LastError == "" {
		out.Status.LastErrorAt = time.Time{}
	}
	writeJSON(w, out)
}

// tierUpload runs an upload pass in every group, answering how many
// segments they committed in all.
func (s *spanning) tierUpload(w http.ResponseWriter, r *http.Request) {
	answers, ok := s.all(w, r, sub(r, nil))
	if !ok || failed(w, answers, false) {
		return
	}
	total := 0
	for g, a := range answers {
		var res struct {
			Uploaded int `json:"uploaded_segments"`
		}
		if err := json.Unmarshal(a.Body, &res); err != nil {
			apiError(w, http.StatusBadGateway, "internal", "replication group "+strconv.Itoa(g)+" answered: "+err.Error())
			return
		}
		total += res.Uploaded
	}
	writeJSON(w, map[string]any{"uploaded_segments": total})
}
