package pgdriver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"
)

// timeZone finds the time zone a DSN names, as gorm's PostgreSQL driver
// does (gorm.io/driver/postgres v1.6.3: timeZoneMatcher).
var timeZone = regexp.MustCompile("(time_zone|TimeZone|timezone)=(.*?)($|&| )")

// Open opens a connection pool on the PostgreSQL database dsn names, with
// what gorm's PostgreSQL driver does to a DSN (a TimeZone sets the
// session's zone and the zone timestamps are read in).
func Open(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	var opts []stdlib.OptionOpenDB
	if m := timeZone.FindStringSubmatch(dsn); len(m) > 2 {
		cfg.RuntimeParams["timezone"] = m[2]
		opts = append(opts, stdlib.OptionAfterConnect(func(_ context.Context, conn *pgx.Conn) error {
			loc, err := time.LoadLocation(m[2])
			if err != nil {
				return err
			}
			conn.TypeMap().RegisterType(&pgtype.Type{Name: "timestamp", OID: pgtype.TimestampOID, Codec: &pgtype.TimestampCodec{ScanLocation: loc}})
			return nil
		}))
	}
	return OpenConfig(*cfg, opts...), nil
}

// OpenConfig opens a connection pool with pgx's configuration, as
// stdlib.OpenDB does.
func OpenConfig(cfg pgx.ConnConfig, opts ...stdlib.OptionOpenDB) *sql.DB {
	return sql.OpenDB(connector{stdlib.GetConnector(cfg, opts...)})
}

// connector makes pgx's connections conns.
type connector struct{ driver.Connector }

func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc := dc.(*stdlib.Conn)
	cfg := sc.Conn().Config()
	noCache := (cfg.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement && cfg.StatementCacheCapacity == 0) ||
		(cfg.DefaultQueryExecMode == pgx.QueryExecModeCacheDescribe && cfg.DescriptionCacheCapacity == 0)
	return &conn{stdConn: sc, pipelines: !noCache}, nil
}
