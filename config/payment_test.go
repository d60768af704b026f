package config_test

import (
	"strings"
	"testing"

	"github.com/seckill/seckill/config"
)

// door is the default; stripe needs its key and signing secret; testpay
// signs with the published development secret unless given one.
func TestPaymentProviderSettings(t *testing.T) {
	c, err := config.LoadFrom(nil)
	if err != nil || c.Payment.Provider != "door" || c.Payment.Testpay.Secret.Value() != config.DevTestpaySecret {
		t.Fatalf("defaults %+v %v", c.Payment, err)
	}
	if _, err := config.LoadFrom(map[string]string{"SECKILL_PAYMENT_PROVIDER": "paypal"}); err == nil {
		t.Fatal("an unknown provider loaded")
	}
	_, err = config.LoadFrom(map[string]string{"SECKILL_PAYMENT_PROVIDER": "stripe"})
	if err == nil || !strings.Contains(err.Error(), "SECKILL_PAYMENT_STRIPE_KEY") {
		t.Fatalf("stripe without its key: %v", err)
	}
	c, err = config.LoadFrom(map[string]string{"SECKILL_PAYMENT_PROVIDER": "stripe",
		"SECKILL_PAYMENT_STRIPE_KEY": "sk_test_x", "SECKILL_PAYMENT_STRIPE_WEBHOOK_SECRET": "whsec_x"})
	if err != nil || strings.Contains(c.String(), "sk_test_x") || strings.Contains(c.String(), "whsec_x") {
		t.Fatalf("stripe: %v, printed secrets: %s", err, c.String())
	}
}
