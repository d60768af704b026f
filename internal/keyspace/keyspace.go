// Package keyspace is the Redis key layout (docs/deploy.md): every key of one
// item shares the hash tag {itemID}, so its scripts run in one cluster slot.
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

// Order is the key of an order's view (a slot of its own).
func Order(prefix, orderID string) string { return prefix + ":order:" + orderID }

// The channels (PUBLISH reaches every node of a cluster).
func StockEvents(prefix string) string { return prefix + ":events:stock" }
func ItemEvents(prefix string) string  { return prefix + ":events:items" }
func OrderEvents(prefix string) string { return prefix + ":events:order" }
