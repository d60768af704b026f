package store

import (
	"errors"

	gomysql "github.com/go-sql-driver/mysql"
)

func mysqlErrNumber(err error) uint16 {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}
