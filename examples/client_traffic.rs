//! A tokio-postgres session that exercises what a Rust driver sends: prepared statements with
//! parameters of many types (binary format), a transaction, a portal read in batches, errors
//! and a pipeline. Run it through `scripts/capture.py` to record tokio-postgres traffic as fuzz
//! seeds (see docs/RELIABILITY.md):
//!
//! ```text
//! cargo run --example client_traffic -- "host=127.0.0.1 port=5499 user=postgres dbname=postgres"
//! ```
//!
//! It checks every answer and exits non-zero on a wrong one, so it doubles as a smoke test
//! against ringwire or PostgreSQL.

use tokio_postgres::{types::ToSql, NoTls, SimpleQueryMessage};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let conninfo = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "host=127.0.0.1 port=6875 user=postgres dbname=postgres".into());
    let (mut client, connection) = tokio_postgres::connect(&conninfo, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("connection: {e}");
        }
    });

    client
        .batch_execute(
            "drop table if exists traffic; \
             create table traffic (id int primary key, name text, score float8, \
             big bigint, flag bool, data bytea)",
        )
        .await?;

    let insert = client
        .prepare("insert into traffic (id, name, score, big, flag, data) values ($1, $2, $3, $4, $5, $6)")
        .await?;
    for i in 0..20i32 {
        let params: [&(dyn ToSql + Sync); 6] = [
            &i,
            &format!("name {i}"),
            &(f64::from(i) * 1.5),
            &(i64::from(i) << 40),
            &(i % 2 == 0),
            &vec![i as u8; 3],
        ];
        client.execute(&insert, &params).await?;
    }

    let select = client
        .prepare("select id, name, score, big, flag, data from traffic where id = $1")
        .await?;
    for i in [0i32, 7, 19] {
        let row = client.query_one(&select, &[&i]).await?;
        let name: String = row.get(1);
        let big: i64 = row.get(3);
        assert_eq!(name, format!("name {i}"));
        assert_eq!(big, i64::from(i) << 40);
    }

    let rows = client
        .query(
            "select id from traffic where score > $1 order by id",
            &[&10.0f64],
        )
        .await?;
    assert_eq!(rows.len(), 13);

    // A transaction with a portal read 5 rows at a time.
    let tx = client.transaction().await?;
    let portal = tx
        .bind("select id, name from traffic order by id", &[])
        .await?;
    let mut seen = 0;
    loop {
        let batch = tx.query_portal(&portal, 5).await?;
        if batch.is_empty() {
            break;
        }
        seen += batch.len();
    }
    assert_eq!(seen, 20);
    tx.execute(
        "update traffic set score = score + 1 where id = $1",
        &[&3i32],
    )
    .await?;
    tx.commit().await?;

    // Constant expressions with typed parameters.
    let row = client
        .query_one(
            "select $1::int4 + 1, $2::text || 'x', $3::bool, now() is not null",
            &[&41i32, &"abc", &true],
        )
        .await?;
    assert_eq!(row.get::<_, i32>(0), 42);
    assert_eq!(row.get::<_, String>(1), "abcx");

    // Errors: a syntax error, a unique violation, then the session goes on.
    let err = client.simple_query("selec 1").await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42601"));
    let err = client
        .execute(
            &insert,
            &[&1i32, &"dup", &0.0f64, &0i64, &true, &Vec::<u8>::new()],
        )
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("23505"));

    // A pipeline: several statements in flight before the first answer.
    let (a, b, c) = tokio::join!(
        client.query_one(&select, &[&1i32]),
        client.query_one(&select, &[&2i32]),
        client.simple_query("select count(*) from traffic"),
    );
    assert_eq!(a?.get::<_, i32>(0), 1);
    assert_eq!(b?.get::<_, i32>(0), 2);
    let count = c?
        .into_iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .unwrap_or_default();
    assert_eq!(count, "20");

    client.batch_execute("drop table traffic").await?;
    println!("client_traffic: every answer was right");
    Ok(())
}
