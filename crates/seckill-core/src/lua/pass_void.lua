-- pass_void.lua: a pass whose answer was lost: find its job, and (for
-- `lua`) make sure that, if it has not run, it never takes anyone. Both
-- strategies' looks call it (strategy/lost_answer.rs). The mark is for
-- `lua`, whose script has no fence. A `lock` commit is kept out by the
-- lock's fence, closed before the look, so `lock`'s look only reads: a
-- Redis that refuses writes for now (`OOM`, `READONLY`...) still answers
-- it.
--
-- KEYS are one sale's, under its hash tag {sale:ID} (keys.rs):
-- KEYS[1]  the sale's queue's jobs hash (job id -> payload)
-- KEYS[2]  the sale's voided: SET of the pass ids looked up after a lost
--          answer (keys.rs: SaleKeys::voided)
-- KEYS[3]  the sale's stock (absent: Redis does not hold the sale)
-- ARGV[1]  the pass's id: the id of the one queue job its orders go in
-- ARGV[2]  '1' to void the pass (`lua`), '0' only to look (`lock`)
--
-- Returns {loaded, payload}: loaded 1 while Redis holds the sale (its
-- stock); payload the job's while the queue holds it (waiting, in
-- flight or dead), else false. Either way the pass is voided first,
-- when asked to.
--
-- A job not found while the sale is loaded (and the pass voided, or
-- fenced) is in PostgreSQL or nowhere, for good: the worker moves a job
-- from the queue to PostgreSQL, never back, and a batch a worker
-- reserved before Redis lost the sale is written only if no load came
-- since (store/confirm.rs). While the sale
-- is not loaded (Redis lost it: a restart without persistence), such a
-- batch may still be written, so nothing is final: the caller asks again.
-- (A failover under `local` that loses the pass's job keeps the sale:
-- that loss is what `replica` durability is for.)
--
-- The race this prevents: `lua` has no lock, so no fence. A pass's script
-- whose answer was lost may not have reached Redis yet (its connection
-- stalled, or the server did): looked up now, its job is not found, and
-- its buyers are told nothing was taken; then it lands and takes their
-- units, orders nobody was told about. As two steps (read the queue,
-- then mark the pass) the script could land between them. Here the look
-- and the mark are one step, and purchase_lua.lua checks the mark before
-- it takes anyone (the same check that keeps a second run of a call from
-- taking twice): a pass not found here never takes anyone later. One
-- found here ran already; it is voided too, so that no run of it but the
-- first can take.
--
-- The set keeps each id, as `returned` keeps each returned order: a pass
-- is voided only after a lost answer, a fault, not per purchase.
if ARGV[2] == '1' then
  redis.call('SADD', KEYS[2], ARGV[1])
end
local loaded = redis.call('EXISTS', KEYS[3])
return {loaded, redis.call('HGET', KEYS[1], ARGV[1])}
