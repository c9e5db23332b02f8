package console

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReasonShape(t *testing.T) {
	for reason, shape := range map[string]string{
		"customer 17 has no VAT number":                                     "customer … has no VAT number",
		"charge order-42: HTTP 503 after 1.5 s":                             "charge order-…: HTTP … after … s",
		"invoice 0198c7a2-5b1e-7c3d-9f00-1234567890ab exists":               "invoice … exists",
		"blob deadbeef12 missing; int64 overflow":                           "blob … missing; int64 overflow",
		"tax service down":                                                  "tax service down",
		"first\r\nsecond 2":                                                 "first\nsecond …",
		"customer … has no VAT number":                                      "customer … has no VAT number",
		"stale: bad version: version \"yesterday\" is not an RFC 3339 time": "stale: bad version: version \"yesterday\" is not an RFC … time",
	} {
		require.Equal(t, shape, reasonShape(reason), reason)
	}
}
