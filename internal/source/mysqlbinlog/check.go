package mysqlbinlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// ErrSettings is returned (wrapped) when the server's binary log cannot
// serve the source: log_bin off, binlog_format not ROW, binlog_row_image
// not FULL, or the user lacks the replication privileges. The message
// names the setting and how to change it; bridge run and migrate exit 2.
var ErrSettings = errors.New("source: mysql-binlog cannot read this server's binary log")

// Server is what the source needs to know of the server it reads.
type Server struct {
	// Flavor is mysql.MariaDBFlavor or mysql.MySQLFlavor.
	Flavor string
	// Version is @@version.
	Version string
	// GTID reports that positions are GTID sets: always on MariaDB, with
	// gtid_mode = ON on MySQL.
	GTID bool
}

// CheckServer reads the server's binary log settings and the user's
// grants, and returns an error wrapping ErrSettings naming the first that
// does not fit (MySQL 8.0 reference manual, "Binary Logging Options and
// Variables"; MariaDB's "Replication and Binary Log System Variables"):
//   - log_bin must be ON (a server option, set at start: --log-bin);
//   - binlog_format must be ROW: STATEMENT and MIXED log statements, not
//     the rows they insert;
//   - binlog_row_image must be FULL: MINIMAL and NOBLOB may leave out of an
//     insert's row the columns its statement did not set (created_at,
//     headers: their defaults), which the relay reads;
//   - binlog_row_metadata must be FULL: the table map of each row event then
//     names its columns, and the relay reads each row by name, whatever
//     ALTER TABLE did since (MINIMAL and NO_LOG give types only);
//   - the user needs REPLICATION SLAVE (to read the log) and REPLICATION
//     CLIENT, BINLOG MONITOR on MariaDB 10.5+ (to read the server's
//     position), or ALL PRIVILEGES.
//
// Other errors are the database's.
func CheckServer(ctx context.Context, db *sql.DB) (Server, error) {
	var srv Server
	var logBin int
	var format, image string
	err := db.QueryRowContext(ctx, "SELECT @@version, @@log_bin, @@binlog_format, @@binlog_row_image").Scan(&srv.Version, &logBin, &format, &image)
	if err != nil {
		return srv, fmt.Errorf("read the server's binary log settings: %w", err)
	}
	srv.Flavor = mysql.MySQLFlavor
	if strings.Contains(strings.ToLower(srv.Version), "mariadb") {
		srv.Flavor, srv.GTID = mysql.MariaDBFlavor, true
	}
	// Every setting that does not fit is named, so that one restart of
	// the server fixes them all.
	var wrong []string
	if logBin == 0 {
		wrong = append(wrong, "log_bin is OFF: start the server with the binary log on (log_bin = <basename> in its configuration, or --log-bin; a restart is needed; on Amazon RDS, a backup retention period above 0)")
	}
	if !strings.EqualFold(format, "ROW") {
		wrong = append(wrong, fmt.Sprintf("binlog_format is %s: set binlog_format = ROW (SET GLOBAL binlog_format = 'ROW', and in the server's configuration so that a restart keeps it); %s logs statements, not the rows they insert", format, format))
	}
	if !strings.EqualFold(image, "FULL") {
		wrong = append(wrong, fmt.Sprintf("binlog_row_image is %s: set binlog_row_image = FULL (SET GLOBAL binlog_row_image = 'FULL', and in the server's configuration); %s may leave out of an insert's row the columns its statement did not set, which the relay reads", image, image))
	}
	var metadata string
	if err := db.QueryRowContext(ctx, "SELECT @@binlog_row_metadata").Scan(&metadata); err != nil {
		metadata = "missing (" + err.Error() + ")"
	}
	if !strings.EqualFold(metadata, "FULL") {
		wrong = append(wrong, fmt.Sprintf("binlog_row_metadata is %s: set binlog_row_metadata = FULL (SET GLOBAL binlog_row_metadata = 'FULL', and in the server's configuration; MariaDB 10.5+, MySQL 8.0.1+); the relay reads each row by its columns' names, which only FULL logs: without them a column added, dropped or moved while it reads would make it read one column for another", metadata))
	}
	if len(wrong) > 0 {
		return srv, fmt.Errorf("%w: %s", ErrSettings, strings.Join(wrong, "; and "))
	}
	if srv.Flavor == mysql.MySQLFlavor {
		var mode string
		if err := db.QueryRowContext(ctx, "SELECT @@gtid_mode").Scan(&mode); err == nil {
			srv.GTID = strings.EqualFold(mode, "ON")
		}
	}
	return srv, checkGrants(ctx, db)
}

// checkGrants reads SHOW GRANTS FOR CURRENT_USER() for the replication
// privileges.
func checkGrants(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, "SHOW GRANTS FOR CURRENT_USER()")
	if err != nil {
		return fmt.Errorf("read the user's grants: %w", err)
	}
	defer rows.Close()
	var all strings.Builder
	var user string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("read the user's grants: %w", err)
		}
		line = strings.ToUpper(line)
		if !strings.Contains(line, " ON *.* ") {
			continue
		}
		if user == "" {
			if _, to, ok := strings.Cut(line, " TO "); ok {
				user = strings.Fields(to)[0]
			}
		}
		all.WriteString(line)
		all.WriteString("\n")
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the user's grants: %w", err)
	}
	g := all.String()
	if strings.Contains(g, "ALL PRIVILEGES") {
		return nil
	}
	var missing []string
	if !strings.Contains(g, "REPLICATION SLAVE") && !strings.Contains(g, "REPLICATION REPLICA") {
		missing = append(missing, "REPLICATION SLAVE")
	}
	if !strings.Contains(g, "REPLICATION CLIENT") && !strings.Contains(g, "BINLOG MONITOR") && !strings.Contains(g, "SUPER") {
		missing = append(missing, "REPLICATION CLIENT")
	}
	if len(missing) == 0 {
		return nil
	}
	if user == "" {
		user = "<user>"
	}
	return fmt.Errorf("%w: the user lacks %s: GRANT %s ON *.* TO %s (REPLICATION CLIENT is BINLOG MONITOR on MariaDB 10.5+)",
		ErrSettings, strings.Join(missing, " and "), strings.Join(missing, ", "), strings.ToLower(user))
}

// Setup creates the table's position table (<table>_binlog) when missing
// and, when it holds no position, stores the server's current one, so that
// the rows committed from now on are read from the binary log, in commit
// order (those committed before are the sweep's). For bridge migrate.
// Errors: ErrSettings (CheckServer); the database's.
func Setup(ctx context.Context, db *outbox.DB, table string) (created bool, err error) {
	store, err := outbox.NewStore(db, table)
	if err != nil {
		return false, err
	}
	q, ok := store.BinlogStatements()
	if !ok {
		return false, fmt.Errorf("%w: source: mysql-binlog needs a MySQL or MariaDB database, not %s", ErrSettings, db.Dialect())
	}
	srv, err := CheckServer(ctx, db.SQL)
	if err != nil {
		return false, err
	}
	if _, err := db.SQL.ExecContext(ctx, q.PositionCreate); err != nil {
		return false, fmt.Errorf("create the position table %s_binlog: %w", table, err)
	}
	var gtid, file, at string
	var offset int64
	switch err := db.SQL.QueryRowContext(ctx, q.PositionRead).Scan(&gtid, &file, &offset, &at); {
	case err == nil:
		return false, nil // kept
	case !errors.Is(err, sql.ErrNoRows):
		return false, fmt.Errorf("read the position table %s_binlog: %w", table, err)
	}
	pos, err := serverPosition(ctx, db.SQL, srv)
	if err != nil {
		return false, err
	}
	if _, err := db.SQL.ExecContext(ctx, q.PositionWrite, pos.GTID, pos.File, int64(pos.Pos)); err != nil {
		return false, fmt.Errorf("store the binary log position of %s: %w", table, err)
	}
	return true, nil
}
