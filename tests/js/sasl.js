// kafkajs authenticating against a raykafka broker's SASL listeners, for
// tests/integration/test_security.py.
//
//   node sasl.js '<json args>'
//
// args.cases: [{name, broker, ca (PEM path, for SASL_SSL) or null, mechanism,
// username, password, expectFailure}]. Each case produces three records to a
// topic of its own through that listener and reads them back with a consumer
// group; a case with expectFailure only connects (it must be refused). Prints
// one JSON object {name: {ok, values | error}} on stdout; kafkajs' own log goes
// to stderr. The cases run concurrently.
'use strict'

const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const args = JSON.parse(process.argv[2] || '{}')

const toStderr = () => ({ namespace, label, log }) => {
  const { message, ...extra } = log
  process.stderr.write(`[kafkajs ${label}] ${namespace}: ${message} ${JSON.stringify(extra)}\n`)
}

function client (c) {
  return new Kafka({
    clientId: `raykafka-sasl-${c.name}`,
    brokers: [c.broker],
    ssl: c.ca ? { ca: [fs.readFileSync(c.ca, 'utf-8')], rejectUnauthorized: true } : false,
    sasl: { mechanism: c.mechanism.toLowerCase(), username: c.username, password: c.password },
    logLevel: logLevel.WARN,
    logCreator: toStderr,
    retry: { retries: c.expectFailure ? 0 : 5 },
    connectionTimeout: 10000,
  })
}

async function roundTrip (c) {
  const kafka = client(c)
  const topic = `js-sasl-${c.name}-${Math.random().toString(16).slice(2, 10)}`
  const producer = kafka.producer({ allowAutoTopicCreation: true })
  await producer.connect()
  await producer.send({ topic, messages: [0, 1, 2].map(i => ({ value: `v${i}` })) })
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: `g-${topic}` })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const values = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${values.length} of 3 records`)), 60000)
    consumer.run({
      eachMessage: async ({ message }) => {
        values.push(message.value.toString())
        if (values.length >= 3) { clearTimeout(timer); resolve() }
      },
    }).catch(reject)
  })
  await consumer.disconnect()
  return values
}

async function refused (c) {
  const admin = client(c).admin()
  try {
    await admin.connect()
    await admin.listTopics()
  } catch (error) {
    return error.type || error.name || String(error)
  } finally {
    await admin.disconnect().catch(() => {})
  }
  return null
}

async function runCase (c) {
  try {
    if (c.expectFailure) {
      const error = await refused(c)
      return { ok: error !== null, error }
    }
    return { ok: true, values: await roundTrip(c) }
  } catch (error) {
    return { ok: false, error: String(error && error.stack ? error.stack : error) }
  }
}

async function main () {
  // The cases are independent (a topic and a group each) and mostly wait (a
  // group's join, the first fetch): run them together.
  const outcomes = await Promise.all(args.cases.map(runCase))
  const results = {}
  args.cases.forEach((c, i) => { results[c.name] = outcomes[i] })
  process.stdout.write(JSON.stringify(results) + '\n')
}

main().catch(error => { process.stderr.write(`${error.stack || error}\n`); process.exit(1) })
