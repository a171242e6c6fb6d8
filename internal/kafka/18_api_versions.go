package kafka

// ApiVersions (key 18), versions 0-4.
//
// Version notes: v3+ requests are flexible but the response header is always
// v0 (KIP-511). A request above our maximum gets a v0-format body with
// UNSUPPORTED_VERSION and our ranges, so clients retry at a version we speak.
// v3+ client software names are not validated.
//
// Not implemented: supported/finalized features (no transaction.version or
// group.version is finalized).

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func apiVersionsBody(resp *kmsg.ApiVersionsResponse) {
	for _, h := range handlerTable() {
		key := kmsg.NewApiVersionsResponseApiKey()
		key.ApiKey = h.key
		key.MinVersion = h.min
		key.MaxVersion = h.max
		resp.ApiKeys = append(resp.ApiKeys, key)
	}
}

func handleApiVersions(rc *reqCtx, req kmsg.Request) reply {
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	apiVersionsBody(resp)
	return reply{resp: resp}
}

// apiVersionsDowngrade answers an ApiVersions request newer than we speak.
func apiVersionsDowngrade() *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	apiVersionsBody(resp)
	return resp
}
