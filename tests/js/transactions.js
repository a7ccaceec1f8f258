// kafkajs transactions against a raykafka broker, for
// tests/integration/test_transactions_clients.py.
//
//   node transactions.js <scenario> '<json args>'
//
// Performs the client side of one scenario and prints what it observed as one
// JSON object on stdout (the Python test asserts on it); kafkajs' own log goes
// to stderr. Exit code 1 with the error on stderr when a client call fails.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

const [scenario, rawArgs] = process.argv.slice(2)
const args = JSON.parse(rawArgs || '{}')

const toStderr = () => ({ namespace, level, label, log }) => {
  const { message, ...extra } = log
  process.stderr.write(`[kafkajs ${label}] ${namespace}: ${message} ${JSON.stringify(extra)}\n`)
}

const kafka = new Kafka({
  clientId: 'raykafka-tests',
  brokers: args.brokers,
  logLevel: logLevel.WARN,
  logCreator: toStderr,
  retry: { retries: 8 },
})

// A timeline on stderr: the Python test shows it when a scenario fails.
const started = Date.now()
const step = what => process.stderr.write(`[+${((Date.now() - started) / 1000).toFixed(2)}s] ${what}\n`)

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))
const unique = prefix => `${prefix}-${Math.random().toString(16).slice(2, 10)}`

async function waitFor(predicate, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await predicate()
    if (value) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(200)
  }
}

function txnValues(tag) {
  const out = []
  for (let i = 0; i < args.perTxn; i++) out.push({ partition: i % args.partitions, value: `${tag}-${i}` })
  return out
}

function transactionalProducer(transactionalId) {
  return kafka.producer({
    transactionalId,
    idempotent: true,
    maxInFlightRequests: 1,
    transactionTimeout: args.txnTimeoutMs,
  })
}

// A group member reading `topic` from the beginning; rows: {partition, offset, value} in arrival order.
async function startReader(topic, { readUncommitted, groupId }) {
  const consumer = kafka.consumer({
    groupId: groupId || unique('js-reader'),
    readUncommitted,
    maxWaitTimeInMs: 250,
    allowAutoTopicCreation: false,
  })
  const rows = []
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  consumer.on(consumer.events.GROUP_JOIN, () => step(`${readUncommitted ? 'read_uncommitted' : 'read_committed'} reader joined ${topic}`))
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      rows.push({ partition, offset: message.offset, value: message.value.toString() })
    },
  })
  return { consumer, rows }
}

// rows once at least `count` arrived, after `quietMs` more to catch extras.
async function collect(reader, count, quietMs = 1500, timeoutMs = 90000) {
  await waitFor(() => reader.rows.length >= count, timeoutMs, `${count} records (have ${reader.rows.length})`)
  await sleep(quietMs)
  return reader.rows.slice()
}

async function readAll(topic, readUncommitted, count) {
  const reader = await startReader(topic, { readUncommitted })
  try {
    return await collect(reader, count)
  } finally {
    await reader.consumer.disconnect()
  }
}

const scenarios = {
  // commit, abort, commit; then what read_committed and read_uncommitted readers see.
  async 'commit-abort-commit'() {
    const producer = transactionalProducer(args.transactionalId)
    await producer.connect()
    try {
      for (const [tag, commit] of [['c1', true], ['a', false], ['c2', true]]) {
        const transaction = await producer.transaction()
        await transaction.send({ topic: args.topic, acks: -1, messages: txnValues(tag) })
        if (commit) await transaction.commit()
        else await transaction.abort()
        step(`transaction ${tag} ${commit ? 'committed' : 'aborted'}`)
      }
    } finally {
      await producer.disconnect()
    }
    const [readCommitted, readUncommitted] = await Promise.all([
      readAll(args.topic, false, 2 * args.perTxn),
      readAll(args.topic, true, 3 * args.perTxn),
    ])
    return { readCommitted, readUncommitted }
  },

  // A read_committed group member reads `source`; the transactional producer writes the transformed
  // records to `sink` and sends the member's offsets with transaction.sendOffsets: aborted once, then
  // committed. admin.fetchOffsets after each.
  async 'consume-transform-produce'() {
    const admin = kafka.admin()
    await admin.connect()
    const reader = await startReader(args.source, { readUncommitted: false, groupId: args.groupId })
    const producer = transactionalProducer(args.transactionalId)
    await producer.connect()
    const result = {}
    try {
      const consumed = await collect(reader, args.inputRecords, 500)
      step(`consumed ${consumed.length} input records`)
      result.consumed = consumed
      const next = {}
      for (const row of consumed) {
        next[row.partition] = Math.max(next[row.partition] || 0, Number(row.offset) + 1)
      }
      const committed = async () => {
        const [entry] = await admin.fetchOffsets({ groupId: args.groupId, topics: [args.source] })
        return entry.partitions.map(({ partition, offset }) => ({ partition, offset }))
      }
      for (const commit of [false, true]) {
        const transaction = await producer.transaction()
        await transaction.send({
          topic: args.sink,
          acks: -1,
          messages: consumed.map(row => ({ partition: 0, value: row.value.toUpperCase() })),
        })
        step(`round ${commit ? 'to commit' : 'to abort'}: output sent`)
        await transaction.sendOffsets({
          consumerGroupId: args.groupId,
          topics: [{
            topic: args.source,
            partitions: Object.entries(next).map(([partition, offset]) => ({
              partition: Number(partition), offset: String(offset),
            })),
          }],
        })
        step('offsets sent')
        if (commit) {
          await transaction.commit()
          step('committed')
          // The offsets become the group's once the COMMIT marker reached the group coordinator.
          const want = JSON.stringify(next)
          const same = parts => JSON.stringify(Object.fromEntries(parts.map(p => [p.partition, Number(p.offset)]))) === want
          let last = []
          try {
            await waitFor(async () => same(last = await committed()), 30000, 'committed offsets')
          } catch (e) { /* reported as is; the test asserts */ }
          result.committedAfterCommit = last
          step(`group offsets ${JSON.stringify(last)}`)
        } else {
          await transaction.abort()
          await sleep(1000)
          result.committedAfterAbort = await committed()
          step(`aborted; group offsets ${JSON.stringify(result.committedAfterAbort)}`)
        }
      }
    } finally {
      await producer.disconnect()
      await reader.consumer.disconnect()
      await admin.disconnect()
    }
    result.output = await readAll(args.sink, false, args.inputRecords)
    return result
  },

  // "before" committed; "open-0", "open-1" in an open transaction; "after" written by a plain
  // producer behind it. read_committed readers must stop before the open transaction until it commits.
  async 'open-transaction'() {
    const producer = transactionalProducer(args.transactionalId)
    const plain = kafka.producer({ allowAutoTopicCreation: false })
    await producer.connect()
    await plain.connect()
    const result = {}
    let committedReader
    let uncommittedReader
    try {
      const first = await producer.transaction()
      await first.send({ topic: args.topic, acks: -1, messages: [{ partition: 0, value: 'before' }] })
      await first.commit()
      const open = await producer.transaction()
      const [sent] = await open.send({
        topic: args.topic, acks: -1, messages: [{ partition: 0, value: 'open-0' }, { partition: 0, value: 'open-1' }],
      })
      result.firstOpenOffset = sent.baseOffset
      const [afterSent] = await plain.send({ topic: args.topic, acks: -1, messages: [{ partition: 0, value: 'after' }] })
      result.afterOffset = afterSent.baseOffset
      step(`open transaction from offset ${sent.baseOffset}, plain record at ${afterSent.baseOffset}`)

      ;[committedReader, uncommittedReader] = await Promise.all([
        startReader(args.topic, { readUncommitted: false }),
        startReader(args.topic, { readUncommitted: true }),
      ])
      result.readUncommitted = await collect(uncommittedReader, 4)
      await waitFor(() => committedReader.rows.length >= 1, 90000, 'read_committed to read "before"')
      await sleep(args.holdMs)
      result.heldReadCommitted = committedReader.rows.slice()
      step(`read_committed holds ${JSON.stringify(result.heldReadCommitted)}`)
      await open.commit()
      step('open transaction committed')
      const held = result.heldReadCommitted.length
      result.readCommittedAfterEnd = (await collect(committedReader, held + 3)).slice(held)
    } finally {
      for (const reader of [committedReader, uncommittedReader]) if (reader) await reader.consumer.disconnect()
      await plain.disconnect()
      await producer.disconnect()
    }
    return result
  },
}

async function main() {
  const run = scenarios[scenario]
  if (!run) throw new Error(`unknown scenario ${scenario}; one of ${Object.keys(scenarios).join(', ')}`)
  const guard = setTimeout(() => {
    process.stderr.write(`scenario ${scenario} did not finish in 200 s\n`)
    process.exit(2)
  }, 200000)
  const result = await run()
  clearTimeout(guard)
  process.stdout.write(JSON.stringify(result) + '\n')
}

main().catch(error => {
  process.stderr.write(`${error && error.stack ? error.stack : error}\n`)
  process.exit(1)
})
