package dialect

import (
	"fmt"
	"strings"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
)

// OutboxTopicDefault is the watermill-sql topic of the outbox; its tables
// are "watermill_postroom_outbox" and "watermill_offsets_postroom_outbox".
const OutboxTopicDefault = "postroom_outbox"

// OutboxRelayGroup is the consumer group of the outbox relay.
const OutboxRelayGroup = "postroom_relay"

// MessageIDColumnLength is the width of the message ID column of
// watermill-sql's message tables as postroom creates them. watermill-sql's
// own is VARCHAR(36), a UUID: a longer ID (a scheduler slot, an EDI control
// number with its sender) would fail with "value too long" on every
// attempt. Every ID the bus accepts (at most 200 bytes) fits.
const MessageIDColumnLength = 255

// ColumnType is a watermill-sql payload column type of t.
func ColumnType(t string) func(string) string { return func(string) string { return t } }

// WideSchema is a watermill-sql schema adapter whose message tables take
// IDs of MessageIDColumnLength bytes, and whose rows are read by
// ReadMessage's rule.
type WideSchema struct{ wsql.SchemaAdapter }

// RequiresTransaction forwards to the wrapped adapter (PostgreSQL creates
// its tables in a transaction under an advisory lock).
func (s WideSchema) RequiresTransaction() bool {
	rt, ok := s.SchemaAdapter.(wsql.RequiresTransaction)
	return ok && rt.RequiresTransaction()
}

// SchemaInitializingQueries creates the table with the wide ID column.
func (s WideSchema) SchemaInitializingQueries(params wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	qs, err := s.SchemaAdapter.SchemaInitializingQueries(params)
	if err != nil {
		return nil, err
	}
	wide := fmt.Sprintf("VARCHAR(%d)", MessageIDColumnLength)
	for i := range qs {
		qs[i].Query = strings.Replace(qs[i].Query, "VARCHAR(36)", wide, 1)
	}
	return qs, nil
}

// UnmarshalMessage reads a row of offset, uuid, payload and metadata by
// ReadMessage's rule.
func (s WideSchema) UnmarshalMessage(params wsql.UnmarshalMessageParams) (wsql.Row, error) {
	r := wsql.Row{}
	return ReadMessage(r, params.Row.Scan(&r.Offset, &r.UUID, &r.Payload, &r.Metadata))
}

// Statements returns the queries of watermill-sql's schema and offsets
// adapters as statements to run in a migration, which holds its own lock.
func Statements(qs []wsql.Query) []string {
	var out []string
	for _, q := range qs {
		if !strings.Contains(q.Query, "pg_advisory_xact_lock") {
			out = append(out, strings.TrimRight(strings.TrimSpace(q.Query), ";"))
		}
	}
	return out
}
