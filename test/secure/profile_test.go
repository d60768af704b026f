package secure_test

import (
	"testing"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/testkit"
)

// TestSecureSale is the secure profile: one sale through seckill api and
// worker with every backend secured at once — Redis with ACL and TLS only,
// MySQL with TLS only (verify-full), RocketMQ with ACL on (the
// application's normal user), and Temporal keeping its state in a
// PostgreSQL reached only over verified TLS — ending with the invariant
// checker clean. The other tests of this package prove each one's refusals.
func TestSecureSale(t *testing.T) {
	requireEnabled(t)
	ca := newTestCA(t)
	redis := startTLSRedis(t, ca, "plain")
	mysql := startTLSMySQL(t)
	tmp := testkit.Config(t).Temporal
	tmp.Address, tmp.Namespace = startTemporalOnTLSPostgres(t, ca), "default"
	tmp.TLS, tmp.TLSFiles = false, config.TLSFiles{}
	runSale(t, backends{redis: &redis, mysql: &mysql, rocketmq: startACLRocketMQ(t), temporal: tmp})
}
