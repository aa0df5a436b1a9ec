// The driver story (tests/drivers.rs) told with node-postgres (`pg`, pure JavaScript, text
// formats, unnamed and named prepared statements; pg-cursor for two clients' cursors read in
// turn). Usage: node pg_story.js HOST PORT
const { Client } = require('pg');
const Cursor = require('pg-cursor');

async function main(host, port) {
  const c = new Client({ host, port, user: 'postgres', database: 'postgres' });
  await c.connect();
  const show = (label, r) => console.log(label, JSON.stringify(r.rows));
  show('literals', await c.query("select 1::int4 as a, 'x'::text as b, 1.5::numeric as n, true as t, null::text as z"));
  show('params', await c.query('select $1::int4 + 1 as a, $2::text as b, $3::bool as c', [41, 'hi', false]));
  await c.query('drop table if exists drv_node');
  await c.query('create table drv_node (id int4 primary key, name text, v float8)');
  for (const row of [[1, 'x', 1.5], [2, 'y', null], [3, null, -2]]) {
    await c.query({ name: 'ins', text: 'insert into drv_node values ($1, $2, $3)', values: row });
  }
  show('rows', await c.query('select * from drv_node order by id'));
  await c.query('begin');
  await c.query("update drv_node set name = 'rolled back' where id = 1");
  await c.query('rollback');
  await c.query('begin');
  await c.query("update drv_node set name = 'kept' where id = 2");
  await c.query('commit');
  show('after transactions', await c.query('select id, name from drv_node order by id'));
  for (const sql of ['select 1/0', "insert into drv_node values (1, 'dup', 0)"]) {
    try {
      await c.query(sql);
      console.log('no error', sql);
    } catch (e) {
      console.log('error', e.code, e.constraint === undefined ? null : e.constraint);
    }
  }
  show('still usable', await c.query('select count(*)::int4 as n from drv_node'));
  for (const id of [0, 2]) {
    show('prepared ' + id, await c.query({ name: 'count', text: 'select count(*)::int4 as n from drv_node where id > $1', values: [id] }));
  }
  // Two clients read cursors in turn (pg-cursor: Execute with a row limit, then Flush; the
  // Sync comes at close), each portal open across the other client's reads.
  const d = new Client({ host, port, user: 'postgres', database: 'postgres' });
  await d.connect();
  const mine = c.query(new Cursor('select id from drv_node order by id'));
  const theirs = d.query(new Cursor('select name from drv_node order by id desc'));
  for (let i = 0; i < 3; i++) {
    show('cursor c ' + i, { rows: await mine.read(1) });
    show('cursor d ' + i, { rows: await theirs.read(1) });
  }
  await mine.close();
  await theirs.close();
  await d.end();
  await c.query('drop table drv_node');
  if (!process.env.STORY_NO_LISTEN) {
    // A second client's 'notification' event hears both notifications while that client
    // sends nothing. (Not their sender's process id: through --upstream that is an upstream
    // backend's.)
    const l = new Client({ host, port, user: 'postgres', database: 'postgres' });
    await l.connect();
    const heard = [];
    const own = [];
    const both = new Promise((resolve) => {
      l.on('notification', (n) => {
        if (n.payload === 'mine') {
          // Its own notification names its own process id, by which a client skips its own
          // work bouncing back (PostgreSQL's NOTIFY documentation).
          own.push(n.processId === l.processID);
          return;
        }
        heard.push([n.channel, n.payload]);
        if (heard.length === 2) resolve();
      });
    });
    await l.query('listen drv_node_ch');
    await c.query("notify drv_node_ch, 'hello'");
    await c.query("select pg_notify('drv_node_ch', 'again')");
    await Promise.race([both, new Promise((resolve) => setTimeout(resolve, 5000))]);
    console.log('notifies', JSON.stringify(heard));
    await l.query("notify drv_node_ch, 'mine'");
    console.log('own notification', JSON.stringify(own));
    await l.end();
  }
  await c.end();
}

main(process.argv[2], Number(process.argv[3])).catch((e) => {
  console.error(e);
  process.exit(1);
});
