// The driver story (tests/drivers.rs) told with pgjdbc, the PostgreSQL JDBC driver (extended
// protocol; server-side prepared statements after prepareThreshold uses). Usage:
// java -cp postgresql.jar:. JdbcStory HOST PORT (a TCP host: JDBC has no Unix sockets)
import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;
import org.postgresql.util.PSQLException;

public class JdbcStory {
    static String rows(ResultSet rs) throws SQLException {
        List<String> out = new ArrayList<>();
        int n = rs.getMetaData().getColumnCount();
        while (rs.next()) {
            List<String> row = new ArrayList<>();
            for (int i = 1; i <= n; i++) {
                row.add(rs.getMetaData().getColumnName(i) + "=" + rs.getString(i));
            }
            out.add(row.toString());
        }
        return out.toString();
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + args[0] + ":" + args[1] + "/postgres?user=postgres&prepareThreshold=2";
        try (Connection c = DriverManager.getConnection(url)) {
            Statement s = c.createStatement();
            System.out.println("literals " + rows(s.executeQuery(
                "select 1::int4 as a, 'x'::text as b, 1.5::numeric as n, true as t, null::text as z")));
            try (PreparedStatement p = c.prepareStatement("select ?::int4 + 1 as a, ?::text as b, ?::numeric as n, ?::bool as t")) {
                p.setInt(1, 41);
                p.setString(2, "hi");
                p.setBigDecimal(3, new BigDecimal("2.50"));
                p.setBoolean(4, false);
                System.out.println("params " + rows(p.executeQuery()));
            }
            s.execute("drop table if exists drv_jdbc");
            s.execute("create table drv_jdbc (id int4 primary key, name text, v float8)");
            try (PreparedStatement p = c.prepareStatement("insert into drv_jdbc values (?, ?, ?)")) {
                Object[][] data = {{1, "x", 1.5}, {2, "y", null}, {3, null, -2.0}};
                for (Object[] row : data) {
                    p.setInt(1, (Integer) row[0]);
                    p.setObject(2, row[1], java.sql.Types.VARCHAR);
                    p.setObject(3, row[2], java.sql.Types.DOUBLE);
                    p.addBatch();
                }
                int[] counts = p.executeBatch();
                System.out.println("batch " + java.util.Arrays.toString(counts));
            }
            System.out.println("rows " + rows(s.executeQuery("select * from drv_jdbc order by id")));
            c.setAutoCommit(false);
            s.executeUpdate("update drv_jdbc set name = 'rolled back' where id = 1");
            c.rollback();
            s.executeUpdate("update drv_jdbc set name = 'kept' where id = 2");
            c.commit();
            c.setAutoCommit(true);
            System.out.println("after transactions " + rows(s.executeQuery("select id, name from drv_jdbc order by id")));
            for (String sql : new String[] {"select 1/0", "insert into drv_jdbc values (1, 'dup', 0)"}) {
                try {
                    s.execute(sql);
                    System.out.println("no error " + sql);
                } catch (PSQLException e) {
                    System.out.println("error " + e.getSQLState() + " "
                        + (e.getServerErrorMessage() == null ? null : e.getServerErrorMessage().getConstraint()));
                }
            }
            // Five runs: past prepareThreshold, pgjdbc switches to a named server-side statement.
            try (PreparedStatement p = c.prepareStatement("select count(*) from drv_jdbc where id > ?")) {
                for (int i = 0; i < 5; i++) {
                    p.setInt(1, i % 3);
                    ResultSet rs = p.executeQuery();
                    rs.next();
                    System.out.println("prepared " + (i % 3) + " " + rs.getLong(1));
                }
            }
            System.out.println("metadata " + c.getMetaData().getDatabaseProductName());
            // pgjdbc sends a SET as an extended-protocol statement: it stays the session's (and
            // rolls back with its transaction), whichever pooled connection runs the next one.
            s.execute("set statement_timeout = '55s'");
            c.setAutoCommit(false);
            s.execute("set statement_timeout = '66s'");
            c.rollback();
            c.setAutoCommit(true);
            System.out.println("count " + rows(s.executeQuery("select count(*) from drv_jdbc")));
            System.out.println("setting " + rows(s.executeQuery("show statement_timeout")));
            s.execute("drop table drv_jdbc");
            if (System.getenv("STORY_NO_LISTEN") == null) {
                // A second connection LISTENs, then waits in getNotifications(timeout): it hears
                // both notifications. (Not their sender's process id: through --upstream that is
                // an upstream backend's.)
                try (Connection l = DriverManager.getConnection(url)) {
                    l.createStatement().execute("listen drv_jdbc_ch");
                    s.execute("notify drv_jdbc_ch, 'hello'");
                    s.execute("select pg_notify('drv_jdbc_ch', 'again')");
                    List<String> heard = new ArrayList<>();
                    long deadline = System.currentTimeMillis() + 5000;
                    while (heard.size() < 2 && System.currentTimeMillis() < deadline) {
                        PGNotification[] got = l.unwrap(PGConnection.class).getNotifications(500);
                        for (PGNotification n : got == null ? new PGNotification[0] : got) {
                            heard.add(n.getName() + " " + n.getParameter());
                        }
                    }
                    System.out.println("notifies " + heard);
                    // Its own notification names its own process id, by which a client skips its
                    // own work bouncing back (PostgreSQL's NOTIFY documentation).
                    l.createStatement().execute("notify drv_jdbc_ch, 'mine'");
                    int own = l.unwrap(PGConnection.class).getBackendPID();
                    PGNotification[] mine = l.unwrap(PGConnection.class).getNotifications(5000);
                    for (PGNotification n : mine == null ? new PGNotification[0] : mine) {
                        System.out.println("own notification " + n.getParameter() + " " + (n.getPID() == own));
                    }
                }
            }
        }
    }
}
