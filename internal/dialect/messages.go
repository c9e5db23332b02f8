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

// MessageIDColumnLength is the width of the ID column of the message tables
// postroom creates: watermill-sql's VARCHAR(36) fails on longer IDs (a
// scheduler slot, say); every ID the bus accepts (≤ 200 bytes) fits.
const MessageIDColumnLength = 255

// ColumnType is a watermill-sql payload column type of t.
func ColumnType(t string) func(string) string { return func(string) string { return t } }

// WideSchema is a schema adapter with IDs of MessageIDColumnLength bytes
// and rows read by ReadMessage.
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

// UnmarshalMessage reads a row by ReadMessage's rule.
func (s WideSchema) UnmarshalMessage(params wsql.UnmarshalMessageParams) (wsql.Row, error) {
	r := wsql.Row{}
	return ReadMessage(r, params.Row.Scan(&r.Offset, &r.UUID, &r.Payload, &r.Metadata))
}

// Statements returns adapter queries as migration statements (without
// the advisory lock: a migration holds its own).
func Statements(qs []wsql.Query) []string {
	var out []string
	for _, q := range qs {
		if !strings.Contains(q.Query, "pg_advisory_xact_lock") {
			out = append(out, strings.TrimRight(strings.TrimSpace(q.Query), ";"))
		}
	}
	return out
}
