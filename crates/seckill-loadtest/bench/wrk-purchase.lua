-- wrk script for comparing seckill-loadtest's `closed` scenario with wrk:
-- the same request (a purchase) on the same number of connections.
--
--   wrk -t2 -c64 -d10s -s crates/seckill-loadtest/bench/wrk-purchase.lua http://127.0.0.1:PORT/api/sales/ID/purchase
--
-- On a sold-out sale every answer is "409 sold_out", decided from the
-- instance's in-memory sold-out flag: the cheapest request the app serves,
-- so the generator, not the app, is what is being compared.
wrk.method = "POST"
wrk.body = '{"user_id":"wrk-buyer"}'
wrk.headers["Content-Type"] = "application/json"
