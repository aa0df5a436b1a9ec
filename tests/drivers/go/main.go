// The driver story (tests/drivers.rs) told with pgx v5 (Go's pure-Go driver: extended protocol,
// binary formats, its statement cache). Usage: pgxstory HOST PORT
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func main() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "host="+os.Args[1]+" port="+os.Args[2]+" user=postgres dbname=postgres sslmode=disable")
	must(err)
	defer conn.Close(ctx)
	var a int32
	var b string
	var n float64
	var t bool
	var z *string
	must(conn.QueryRow(ctx, "select 1::int4, 'x'::text, 1.5::numeric::float8, true, null::text").Scan(&a, &b, &n, &t, &z))
	fmt.Println("literals", a, b, n, t, z == nil)
	must(conn.QueryRow(ctx, "select $1::int4 + 1, $2::text, $3::bool", 41, "hi", false).Scan(&a, &b, &t))
	fmt.Println("params", a, b, t)
	_, err = conn.Exec(ctx, "drop table if exists drv_pgx")
	must(err)
	_, err = conn.Exec(ctx, "create table drv_pgx (id int4 primary key, name text, v float8)")
	must(err)
	batch := &pgx.Batch{}
	batch.Queue("insert into drv_pgx values ($1, $2, $3)", 1, "x", 1.5)
	batch.Queue("insert into drv_pgx values ($1, $2, $3)", 2, "y", nil)
	batch.Queue("insert into drv_pgx values ($1, $2, $3)", 3, nil, -2.0)
	must(conn.SendBatch(ctx, batch).Close())
	rows, err := conn.Query(ctx, "select id, name, v from drv_pgx order by id")
	must(err)
	for rows.Next() {
		var id int32
		var name *string
		var v *float64
		must(rows.Scan(&id, &name, &v))
		fmt.Println("row", id, deref(name), derefF(v))
	}
	must(rows.Err())
	tx, err := conn.Begin(ctx)
	must(err)
	_, err = tx.Exec(ctx, "update drv_pgx set name = 'rolled back' where id = 1")
	must(err)
	must(tx.Rollback(ctx))
	tx, err = conn.Begin(ctx)
	must(err)
	_, err = tx.Exec(ctx, "update drv_pgx set name = 'kept' where id = 2")
	must(err)
	must(tx.Commit(ctx))
	var names []string
	rows, err = conn.Query(ctx, "select coalesce(name, 'NULL') from drv_pgx order by id")
	must(err)
	for rows.Next() {
		var s string
		must(rows.Scan(&s))
		names = append(names, s)
	}
	must(rows.Err())
	fmt.Println("after transactions", names)
	for _, sql := range []string{"select 1/0", "insert into drv_pgx values (1, 'dup', 0)"} {
		_, err = conn.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			fmt.Println("error", pgErr.Code, pgErr.ConstraintName, pgErr.TableName)
		} else {
			fmt.Println("no server error", sql, err)
		}
	}
	var count int64
	for _, id := range []int32{0, 2} {
		must(conn.QueryRow(ctx, "select count(*) from drv_pgx where id > $1", id).Scan(&count))
		fmt.Println("prepared", id, count)
	}
	// pgx prepares every statement, a SET too: it stays the session's (and rolls back with
	// its transaction), whichever pooled connection runs the next one.
	_, err = conn.Exec(ctx, "set statement_timeout = '55s'")
	must(err)
	tx, err = conn.Begin(ctx)
	must(err)
	_, err = tx.Exec(ctx, "set statement_timeout = '66s'")
	must(err)
	must(tx.Rollback(ctx))
	var setting string
	must(conn.QueryRow(ctx, "show statement_timeout").Scan(&setting))
	fmt.Println("setting", setting)
	// Common types as parameters and results in pgx's binary formats.
	var (
		by   []byte
		d    time.Time
		ts   time.Time
		tstz time.Time
		ia   []*int32
		ta   []string
		u    [16]byte
		js   map[string]any
		iv   time.Duration
		i8   int64
		i2   int16
		f4   float32
	)
	one := int32(1)
	must(conn.QueryRow(ctx,
		"select $1::bytea, $2::date, $3::timestamp, $4::timestamptz, $5::int4[], $6::text[], $7::uuid, $8::jsonb, $9::interval, $10::int8, $11::int2, $12::float4",
		[]byte{0, 255, 'a'}, time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 2, 3, 4, 5, 678901000, time.UTC), time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC),
		[]*int32{&one, nil}, []string{"a", "b c"}, [16]byte{15: 5}, map[string]any{"a": []int{1, 2}},
		26*time.Hour+5*time.Second, int64(1)<<40, int16(7), float32(1.5),
	).Scan(&by, &d, &ts, &tstz, &ia, &ta, &u, &js, &iv, &i8, &i2, &f4))
	fmt.Println("types", by, d.Format(time.DateOnly), ts.UTC().Format(time.RFC3339Nano), tstz.UTC().Format(time.RFC3339Nano),
		*ia[0], ia[1] == nil, ta, u, js, iv, i8, i2, f4)
	_, err = conn.Exec(ctx, "drop table drv_pgx")
	must(err)
	if os.Getenv("STORY_NO_LISTEN") == "" {
		// A second connection LISTENs and waits in WaitForNotification: it hears both
		// notifications. (Not their sender's process id: through --upstream that is an
		// upstream backend's.)
		l, err := pgx.Connect(ctx, "host="+os.Args[1]+" port="+os.Args[2]+" user=postgres dbname=postgres sslmode=disable")
		must(err)
		_, err = l.Exec(ctx, "listen drv_pgx_ch")
		must(err)
		_, err = conn.Exec(ctx, "notify drv_pgx_ch, 'hello'")
		must(err)
		_, err = conn.Exec(ctx, "select pg_notify('drv_pgx_ch', 'again')")
		must(err)
		var heard []string
		wait, cancel := context.WithTimeout(ctx, 5*time.Second)
		for len(heard) < 2 {
			n, err := l.WaitForNotification(wait)
			if err != nil {
				break
			}
			heard = append(heard, n.Channel+" "+n.Payload)
		}
		// Its own notification names its own process id, by which a client skips its own
		// work bouncing back (PostgreSQL's NOTIFY documentation).
		_, err = l.Exec(ctx, "notify drv_pgx_ch, 'mine'")
		must(err)
		if n, err := l.WaitForNotification(wait); err == nil {
			fmt.Println("own notification", n.Payload, n.PID == l.PgConn().PID())
		}
		cancel()
		fmt.Println("notifies", heard)
		must(l.Close(ctx))
	}
}

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}

func derefF(f *float64) string {
	if f == nil {
		return "NULL"
	}
	return fmt.Sprint(*f)
}
