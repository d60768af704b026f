// Package keyspace is seckill's Redis key layout, written once for stock,
// outbox and orderstatus. P is the configured key prefix ("seckill").
//
// Every key of one item shares the hash tag {itemID}, so one item's keys live
// in one cluster slot and its scripts run unchanged on Redis Cluster:
//
//	P:{42}:stock    string  units not reserved (stock_left)
//	P:{42}:buyers   hash    user id -> order id; the buyer's mark, never removed
//	P:{42}:orders   hash    order id -> reservation JSON; removed on release
//	P:{42}:outbox   stream  reservations waiting to be published
//	P:{42}:released set     order ids whose unit was released or retired; never restored
//	P:{42}:adds     hash    add id -> units, one entry per stock add applied
//	P:{42}:rev      string  revision of the item's sale data (end, stock_total)
//	P:{42}:endkey   string  the Idempotency-Key of the request that ended the sale
//	P:{42}:short    string  reservations not deducted yet beyond the stock row's units, as
//	                        the last recount found them (absent: none); releases cover them
//
// An order's view is one key of its own (its slot is the order's):
//
//	P:order:<id>    string  latest order view JSON (TTL)
//
// Channels (PUBLISH needs no key; on a cluster it reaches every node):
//
//	P:events:stock  the id of an item whenever a unit comes back
//	P:events:items  the id of an item whose sale data changed
//	P:events:order  every published order view
package keyspace

import "strconv"

// Item is the keys of one item.
type Item struct{ Stock, Buyers, Orders, Outbox, Released, Adds, Rev, Short string }

// ItemKeys returns the keys of an item under prefix.
func ItemKeys(prefix string, itemID int64) Item {
	tag := prefix + ":{" + strconv.FormatInt(itemID, 10) + "}:"
	return Item{Stock: tag + "stock", Buyers: tag + "buyers", Orders: tag + "orders", Outbox: tag + "outbox",
		Released: tag + "released", Adds: tag + "adds", Rev: tag + "rev", Short: tag + "short"}
}

// Order is the key of an order's view.
func Order(prefix, orderID string) string { return prefix + ":order:" + orderID }

// The channels.
func StockEvents(prefix string) string { return prefix + ":events:stock" }
func ItemEvents(prefix string) string  { return prefix + ":events:items" }
func OrderEvents(prefix string) string { return prefix + ":events:order" }
