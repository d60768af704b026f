// Package queue is the RocketMQ side of the pipeline; delivery is at least once.
package queue

import (
	"fmt"
	"os"
	"sync/atomic"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/seckill/seckill/config"
)

// SetClientLogLevel sets the RocketMQ client library's own (global) logger.
func SetClientLogLevel(level string) { rlog.SetLogLevel(level) }

var instanceSeq atomic.Int64

// instanceName gives every client its own: the library otherwise shares one per process.
func instanceName(role string) string {
	return fmt.Sprintf("seckill-%s-%d-%d", role, os.Getpid(), instanceSeq.Add(1))
}

// credentials sign requests for a broker with ACL on (empty: unsigned).
func credentials(accessKey string, secretKey config.Secret) primitive.Credentials {
	return primitive.Credentials{AccessKey: accessKey, SecretKey: secretKey.Value()}
}
