// The storefront: the sales with their countdowns (server clock), the buy
// button, the order page followed live over the order's event stream, and
// the buyer's own orders.
"use strict";

(() => {
  const S = seckill, $ = id => document.getElementById(id);
  let items = new Map();        // id -> item view (GET /api/v1/items)
  const cards = new Map();      // id -> {root, refs}
  let follow = null;            // AbortController of the open order stream
  let orderView = null;         // the order page's latest view
  let ordersCursor = "";
  const mine = new Map();       // item id -> the buyer's newest order of it {order_id, status}

  // ------------------------------------------------------------ sign-in
  const signin = S.signInPanel({ role: "buyer", label: "Buyer token", placeholder: "paste the token you were given",
    needs: "the storefront needs a buyer token", devUser: 0, who: info => `Signed in as buyer ${info.user}`,
    changed: t => { token = t; loadMine(); route(); } });
  let token = signin.token;

  // ------------------------------------------------------------ sales
  // state is the sale's state on the server's clock: an operator's "end now"
  // moves end_at (and the status to ENDED), which the next poll brings. Sold
  // out is the API's word (status SOLD_OUT, stock_left 0), or a purchase's
  // 410 SOLD_OUT until the next poll.
  function state(it, now) {
    if (it.status === "ENDED" || now >= Date.parse(it.end_at)) return "ENDED";
    if (now < Date.parse(it.start_at)) return "UPCOMING";
    if (it.status === "SOLD_OUT" || it.stock_left <= 0) return "SOLD_OUT";
    return "ACTIVE";
  }
  const stateWords = { UPCOMING: "Not started", ACTIVE: "On sale", SOLD_OUT: "Sold out", ENDED: "Ended" };

  function card(it) {
    let c = cards.get(it.id);
    if (c) return c;
    const r = {};
    const root = S.el("article", { class: "card", id: `sale-${it.id}`, "aria-labelledby": `sale-${it.id}-name` },
      r.name = S.el("h3", { id: `sale-${it.id}-name` }),
      S.el("div", { class: "row" }, r.badge = S.el("span", { class: "badge", id: `sale-${it.id}-state` }),
        r.price = S.el("span", { class: "price" })),
      r.units = S.el("p", { class: "count", id: `sale-${it.id}-units` }),
      r.clock = S.el("p", { class: "count", id: `sale-${it.id}-clock`, "aria-live": "off" }),
      S.el("div", { class: "row" },
        r.buy = S.el("button", { type: "button", id: `buy-${it.id}`, onclick: () => buy(it.id) }, "Buy now"),
        r.soldOut = S.el("span", { class: "soldout", id: `sale-${it.id}-soldout`, hidden: true }, "Sold out"),
        r.mine = S.el("a", { id: `sale-${it.id}-mine`, hidden: true })),
      r.msg = S.el("p", { class: "msg", id: `sale-${it.id}-msg`, role: "status" }));
    c = { root, r };
    cards.set(it.id, c);
    $("sales").append(root);
    return c;
  }

  function paintSales() {
    const now = S.now();
    for (const it of items.values()) {
      const { r } = card(it);
      const st = state(it, now);
      r.name.textContent = it.name;
      r.badge.textContent = stateWords[st];
      r.badge.className = "badge " + st;
      r.price.textContent = S.money(it.price_cents, it.currency);
      r.units.textContent = `${Math.max(it.stock_left, 0)} of ${it.stock_total} units left`;
      const start = Date.parse(it.start_at), end = Date.parse(it.end_at);
      r.clock.textContent = st === "UPCOMING" ? `Starts in ${S.duration(start - now)}`
        : st === "ENDED" ? `Ended ${S.when(it.end_at)}`
        : `Ends in ${S.duration(end - now)}`;
      // Buyable while the window is open and units are left. Sold out, the
      // button gives way to the words (a unit a cancelled or unpaid order
      // gives back brings it back with the next poll).
      const open = st === "ACTIVE";
      r.buy.disabled = !open;
      r.buy.hidden = st === "SOLD_OUT";
      r.soldOut.hidden = st !== "SOLD_OUT";
      r.buy.setAttribute("aria-describedby", `sale-${it.id}-state sale-${it.id}-clock`);
      r.buy.dataset.open = String(open);
      // A buyer who ordered this sale keeps the way to the order, whatever its state.
      const o = mine.get(it.id);
      r.mine.hidden = !o;
      if (o) {
        r.mine.href = `#/orders/${o.order_id}`;
        r.mine.textContent = o.status ? `Your order: ${statusWords[o.status] || o.status}` : "Your order";
      }
    }
    for (const [id, c] of cards) if (!items.has(id)) { c.root.remove(); cards.delete(id); }
    if (items.size === 0 && !$("sales-msg").classList.contains("bad")) S.say($("sales-msg"), "", "No sales right now.");
  }

  async function loadSales() {
    const r = await S.call("GET", "/api/v1/items");
    if (!r.ok) { S.say($("sales-msg"), "bad", "The sales could not be loaded: " + S.errorText(r)); return; }
    const list = Array.isArray(r.data) ? r.data : (r.data && r.data.items) || [];
    items = new Map(list.map(it => [it.id, it]));
    S.say($("sales-msg"), "", "");
    paintSales();
  }

  async function buy(id) {
    const { r } = cards.get(id);
    if (!token) { S.say(r.msg, "warn", "Sign in first: paste your buyer token above."); $("signin").hidden = false; $("token").focus(); return; }
    r.buy.disabled = true;
    S.say(r.msg, "", "Sending your order…");
    const res = await S.call("POST", `/api/v1/seckill/${id}`, { token });
    const code = res.error && res.error.code;
    if (res.status === 202) mine.set(id, { order_id: res.data.order_id, status: res.data.status });
    if (code === "ALREADY_PURCHASED" && res.error.order_id) mine.set(id, { order_id: res.error.order_id, status: "" });
    if (code === "SOLD_OUT" && items.has(id)) items.get(id).stock_left = 0; // until the next poll says otherwise
    paintSales();
    if (res.status === 202) {
      S.say(r.msg, "ok", "Accepted: a unit is reserved for you. ", S.el("a", { href: `#/orders/${res.data.order_id}` }, "Follow your order"));
      location.hash = `#/orders/${res.data.order_id}`;
      return;
    }
    switch (code) {
      case "SOLD_OUT": S.say(r.msg, "bad", "Sold out: every unit is taken. A unit comes back if an order is cancelled or not paid in time."); break;
      case "ALREADY_PURCHASED": S.say(r.msg, "warn", "You already bought this item. ",
        S.el("a", { href: `#/orders/${res.error.order_id}` }, "See your order")); break;
      case "RATE_LIMITED": S.say(r.msg, "warn", `Too many requests: wait ${res.retryAfter || 1} s and try again.`); break;
      case "SALE_NOT_STARTED": S.say(r.msg, "warn", "The sale has not started yet."); break;
      case "SALE_ENDED": S.say(r.msg, "bad", "The sale has ended."); break;
      case "UNAUTHORIZED": S.say(r.msg, "bad", "Your sign-in was refused: sign in again. (" + res.error.message + ")"); break;
      default: S.say(r.msg, "bad", "Not bought: " + S.errorText(res));
    }
  }

  // ------------------------------------------------------------ one order
  const reasons = {
    PAYMENT_TIMEOUT: "the payment window closed before a payment arrived; the unit went back on sale",
    BUYER_CANCELLED: "you cancelled it; the unit went back on sale",
    CANCELLED_BY_OPERATOR: "an operator cancelled it",
    STOCK_EXHAUSTED: "the store had no unit left for this reservation",
    DUPLICATE_ORDER: "you already hold another order for this item",
    ITEM_NOT_FOUND: "the item no longer exists",
    SUPPORT_REFUND: "the shop refunded your payment; the unit went back on sale",
  };
  function reasonWords(reason) {
    if (!reason) return "";
    for (const [code, words] of Object.entries(reasons)) if (reason.startsWith(code)) return words;
    return reason;
  }
  // refundWords says a refund in words: its amount (the view's, else the
  // item's price), the provider's refund id and the day it was confirmed.
  function refundWords(v) {
    const it = items.get(v.item_id);
    const amount = v.refund_amount !== undefined ? S.money(v.refund_amount, v.refund_currency)
      : it ? S.money(it.price_cents, it.currency) : "your payment";
    const on = v.refunded_at ? ` on ${new Date(v.refunded_at).toLocaleDateString()}` : "";
    return `Refunded ${amount}${on}` + (v.refund_id ? `, refund id ${v.refund_id}` : "");
  }
  function words(v) {
    switch (v.status) {
      case "QUEUED": return "Queued: your unit is reserved and the order is being recorded.";
      case "PENDING_PAYMENT": return "Waiting for your payment.";
      case "PAID": return v.settling ? "Paid: your payment is recorded; the order is being settled." : "Paid: the unit is yours.";
      case "REFUNDED": return refundWords(v) + ": " + (reasonWords(v.reason) || "no unit could be delivered") + ".";
      case "CANCELLED": return "Cancelled: " + (reasonWords(v.reason) || "no reason given") + ".";
      case "FAILED": return "Failed: " + (reasonWords(v.reason) || "no reason given") + ".";
      default: return `${v.status}${v.reason ? ": " + reasonWords(v.reason) : ""}.`;
    }
  }
  const statusWords = { QUEUED: "Queued", PENDING_PAYMENT: "Waiting for payment", PAID: "Paid", CANCELLED: "Cancelled", FAILED: "Failed", REFUNDED: "Refunded" };
  const isFinal = s => s === "PAID" || s === "CANCELLED" || s === "FAILED" || s === "REFUNDED";

  function paintOrder() {
    const v = orderView;
    if (!v) return;
    $("order-status").textContent = statusWords[v.status] || v.status;
    $("order-status").className = "status " + v.status;
    $("order-status").dataset.status = v.status;
    $("order-words").textContent = words(v);
    const it = items.get(v.item_id);
    $("order-sale").textContent = it ? `${it.name} — ${S.money(it.price_cents, it.currency)}` : `Sale ${v.item_id}`;
    const path = ["QUEUED", "PENDING_PAYMENT", isFinal(v.status) ? v.status : "PAID"];
    const at = path.indexOf(v.status);
    $("order-steps").replaceChildren(...path.map((s, i) =>
      S.el("li", { class: i < at ? "done" : i === at ? "now" : "", "aria-current": i === at ? "step" : null }, statusWords[s] || s)));
    const now = S.now(), payBy = v.pay_by ? Date.parse(v.pay_by) : 0;
    // An order is payable from its 202 (pay_by is known then), QUEUED or PENDING_PAYMENT alike.
    const open = v.status === "PENDING_PAYMENT" || v.status === "QUEUED";
    const payable = open && payBy > now;
    $("order-payby").textContent = !open ? ""
      : payable ? `Pay within ${S.duration(payBy - now)} (by ${S.when(v.pay_by)})`
      : payBy ? "The payment window has closed." : "You can pay as soon as the order is recorded.";
    $("order-pay").disabled = !payable || !token;
    $("order-cancel").disabled = !payable || !token;
  }

  function showOrder(id) {
    $("order-h").textContent = `Order ${id}`;
    orderView = null;
    $("order-status").textContent = "Loading…";
    $("order-status").dataset.status = "";
    ["order-words", "order-payby", "order-sale", "order-live"].forEach(x => $(x).textContent = "");
    $("order-steps").replaceChildren();
    $("order-pay").disabled = $("order-cancel").disabled = true;
    S.say($("order-msg"), "", "");
    if (!token) { S.say($("order-msg"), "warn", "Sign in to see this order."); return; }
    follow = new AbortController();
    followOrder(id, follow.signal);
  }

  function take(v) {
    if (!v || !v.status) return;
    orderView = v;
    paintOrder();
  }

  // followOrder reads the order's server-sent events with fetch (EventSource
  // cannot send the Authorization header) and reconnects until the order is
  // final or the page moves on.
  async function followOrder(id, signal) {
    const live = $("order-live");
    while (!signal.aborted) {
      let res;
      try {
        res = await fetch(`/api/v1/orders/${encodeURIComponent(id)}/events`,
          { headers: { "Authorization": "Bearer " + token, "Accept": "text/event-stream" }, signal, cache: "no-store" });
      } catch (e) {
        if (signal.aborted) return;
        live.textContent = "Connection lost; reconnecting…";
        await sleep(2000, signal);
        continue;
      }
      if (!res.ok) {
        const text = await res.text().catch(() => "");
        let err = null;
        try { err = JSON.parse(text).error; } catch (e) { /* not JSON */ }
        const r = { status: res.status, error: err || { code: "HTTP_" + res.status, message: text.slice(0, 200) } };
        if (res.status === 404 || res.status === 401 || res.status === 400) { S.say($("order-msg"), "bad", S.errorText(r)); $("order-status").textContent = "—"; return; }
        live.textContent = "Live updates paused: " + S.errorText(r) + "; retrying…";
        const g = await S.call("GET", `/api/v1/orders/${encodeURIComponent(id)}`, { token });
        if (g.ok) take(g.data);
        if (orderView && isFinal(orderView.status)) { live.textContent = ""; return; }
        await sleep(1000 * (Number(res.headers.get("Retry-After")) || 2), signal);
        continue;
      }
      live.textContent = "Following this order live.";
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let i;
          while ((i = buf.indexOf("\n\n")) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            let ev = "message", data = "";
            for (const line of block.split("\n")) {
              if (line.startsWith("event:")) ev = line.slice(6).trim();
              else if (line.startsWith("data:")) data += line.slice(5).trim();
            }
            if (ev === "status" && data) { try { take(JSON.parse(data)); } catch (e) { /* ignore a torn event */ } }
          }
        }
      } catch (e) {
        if (signal.aborted) return;
      }
      if (orderView && isFinal(orderView.status) && !mayRefund(orderView)) { live.textContent = "This order is final."; return; }
      live.textContent = orderView && isFinal(orderView.status) ? "Closed; watching for the refund of a payment made for it…" : "Reconnecting…";
      await sleep(isFinal(orderView && orderView.status) ? 3000 : 1000, signal);
    }
  }
  // mayRefund: a closed order whose provider payment may still succeed (the
  // buyer paid at the checkout, then cancelled): its saga refunds it and the
  // order becomes REFUNDED, which the stream, closed at the close, does not
  // bring. The page asks again for 10 minutes after the close.
  function mayRefund(v) {
    return S.viaCheckout() && (v.status === "CANCELLED" || v.status === "FAILED") && S.now() - Date.parse(v.updated_at) < 600000;
  }
  function sleep(ms, signal) {
    return new Promise(res => {
      const t = setTimeout(res, ms);
      if (signal) signal.addEventListener("abort", () => { clearTimeout(t); res(); }, { once: true });
    });
  }

  // checkout opens the order's payment at the provider and goes to its page,
  // which sends the buyer back here (SECKILL_PAYMENT_RETURN_URL); the
  // provider's notification makes the order PAID, which the stream brings.
  async function checkout(v) {
    S.say($("order-msg"), "", "Opening the payment page…");
    const r = await S.call("POST", `/api/v1/orders/${v.order_id}/checkout`, { token });
    if (r.ok && r.data.checkout_url) {
      S.say($("order-msg"), "ok", `Paying ${S.money(r.data.amount, r.data.currency)} at the payment page…`);
      location.assign(r.data.checkout_url);
      return;
    }
    S.say($("order-msg"), r.ok ? "warn" : "bad", r.ok
      ? `Payment ${r.data.payment_id} of ${S.money(r.data.amount, r.data.currency)} is open at the provider; pay it with the provider's form.`
      : refusal(r, "paid"));
    paintOrder();
  }
  function refusal(r, done) {
    const code = r.error && r.error.code;
    return code === "ORDER_NOT_PAYABLE" ? `This order cannot be ${done} any more: ` + S.errorText(r)
      : code === "RATE_LIMITED" ? `Too many requests: wait ${r.retryAfter || 1} s and try again.` : S.errorText(r);
  }

  async function act(what) {
    const v = orderView;
    if (!v) return;
    $("order-pay").disabled = $("order-cancel").disabled = true;
    if (what === "pay" && S.viaCheckout()) { checkout(v); return; }
    S.say($("order-msg"), "", what === "pay" ? "Paying…" : "Cancelling…");
    const r = await S.call("POST", `/api/v1/orders/${v.order_id}/${what}`, { token });
    if (r.status === 200) {
      take(r.data);
      S.say($("order-msg"), "ok", what === "pay" ? "Payment recorded." : "Order cancelled.");
    } else if (r.status === 202) {
      take(r.data);
      S.say($("order-msg"), "ok", "Recorded; the order is finishing.");
    } else {
      S.say($("order-msg"), "bad", refusal(r, what === "pay" ? "paid" : "cancelled"));
      paintOrder();
    }
  }
  $("order-pay").addEventListener("click", () => act("pay"));
  $("order-cancel").addEventListener("click", () => act("cancel"));

  // ------------------------------------------------------------ my orders
  // loadMine reads the buyer's newest orders (one page) into mine: each sale's
  // card links its order. Read at sign-in and on the way back to the sales,
  // not on every poll (the buyer's rate limit is for buying).
  async function loadMine() {
    mine.clear();
    if (!token) { paintSales(); return; }
    const r = await S.call("GET", "/api/v1/orders?limit=100", { token });
    if (!r.ok) return;
    for (const o of (r.data && r.data.orders) || []) {
      if (!mine.has(o.item_id)) mine.set(o.item_id, { order_id: o.order_id, status: o.status });
    }
    paintSales();
  }

  async function loadOrders(more) {
    if (!more) { $("orders").replaceChildren(); ordersCursor = ""; }
    if (!token) { S.say($("orders-msg"), "warn", "Sign in to see your orders."); $("orders-more").hidden = true; return; }
    const q = "?limit=20" + (ordersCursor ? "&cursor=" + encodeURIComponent(ordersCursor) : "");
    const r = await S.call("GET", "/api/v1/orders" + q, { token });
    if (!r.ok) { S.say($("orders-msg"), "bad", "Your orders could not be loaded: " + S.errorText(r)); return; }
    const list = (r.data && r.data.orders) || [];
    S.say($("orders-msg"), "", !more && list.length === 0 ? "No orders yet." : "");
    for (const o of list) {
      const it = items.get(o.item_id);
      $("orders").append(S.el("tr", {},
        S.el("td", {}, S.el("a", { href: `#/orders/${o.order_id}` }, S.el("code", {}, o.order_id))),
        S.el("td", {}, it ? it.name : `Sale ${o.item_id}`),
        S.el("td", {}, statusWords[o.status] || o.status, o.status === "REFUNDED" ? S.el("div", { class: "muted" }, refundWords(o))
          : o.reason ? S.el("div", { class: "muted" }, reasonWords(o.reason)) : null),
        S.el("td", {}, (o.status === "PENDING_PAYMENT" || o.status === "QUEUED") && o.pay_by ? S.when(o.pay_by) : "—"),
        S.el("td", {}, S.when(o.created_at))));
    }
    ordersCursor = (r.data && r.data.next_cursor) || "";
    $("orders-more").hidden = !ordersCursor;
  }
  $("orders-more").addEventListener("click", () => loadOrders(true));

  // ------------------------------------------------------------ routing
  function route() {
    if (follow) { follow.abort(); follow = null; }
    const h = location.hash.replace(/^#/, "") || "/";
    const m = h.match(/^\/orders\/([0-9A-Za-z]+)$/);
    $("view-sales").hidden = h !== "/";
    $("view-orders").hidden = h !== "/orders";
    $("view-order").hidden = !m;
    if (m) showOrder(m[1]);
    else if (h === "/orders") loadOrders(false);
    else if (h === "/" && started) loadMine();
    else if (h !== "/") { location.hash = "#/"; return; }
    document.title = m ? "seckill — order" : h === "/orders" ? "seckill — my orders" : "seckill — sales";
  }
  window.addEventListener("hashchange", route);

  let started = false;
  async function start() {
    await signin.start($("sales-msg"));
    route();
    await loadSales();
    await loadMine();
    started = true;
    // Countdowns tick every 200 ms on the server's clock; the sales are
    // re-read every second (units left, and a sale an operator ended).
    setInterval(() => { paintSales(); paintOrder(); }, 200);
    const poll = async () => { await loadSales(); setTimeout(poll, 1000); };
    setTimeout(poll, 1000);
    setInterval(S.syncClock, 60000);
  }
  start();
})();
