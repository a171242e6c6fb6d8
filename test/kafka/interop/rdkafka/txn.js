// Transactional producer with a current librdkafka (node-rdkafka): commits,
// aborts and commits again, interleaved on two partitions; a read_committed
// consumer must see exactly the committed records (even where aborted ones
// share a fetch response), a read_uncommitted one all of them.
// Usage: node txn.js host:port topic
'use strict'
const Kafka = require('node-rdkafka')

const [broker, topic] = process.argv.slice(2)
const call = (fn) => new Promise((resolve, reject) => fn(err => err ? reject(err) : resolve()))

function connectProducer () {
  const p = new Kafka.Producer({ 'bootstrap.servers': broker, 'transactional.id': 'rdkafka-txn-id', dr_cb: true, 'linger.ms': 5 })
  p.setPollInterval(20)
  return new Promise((resolve, reject) => {
    p.on('ready', () => resolve(p))
    p.connect({}, err => { if (err) reject(err) })
  })
}

function consume (group, isolation, want) {
  const c = new Kafka.KafkaConsumer({ 'bootstrap.servers': broker, 'group.id': group, 'isolation.level': isolation,
    'enable.auto.commit': false, 'fetch.wait.max.ms': 200 }, { 'auto.offset.reset': 'earliest' })
  const seen = []
  c.on('data', m => seen.push(m.value.toString()))
  return new Promise((resolve, reject) => {
    c.on('ready', async () => {
      c.subscribe([topic])
      c.consume()
      const deadline = Date.now() + 30000
      while (seen.length < want && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, 100))
      await new Promise(resolve => setTimeout(resolve, 1500)) // nothing more arrives
      c.disconnect(() => resolve(seen))
    })
    c.connect({}, err => { if (err) reject(err) })
  })
}

async function main () {
  const p = await connectProducer()
  await call(cb => p.initTransactions(10000, cb))
  const committed = []
  for (const [name, commit] of [['c1', true], ['a1', false], ['c2', true], ['a2', false], ['c3', true]]) {
    await call(cb => p.beginTransaction(cb))
    const values = []
    for (let i = 0; i < 10; i++) {
      values.push(`${name}-${i}`)
      p.produce(topic, i % 2, Buffer.from(`${name}-${i}`))
    }
    // Sent before the end: librdkafka purges what is still queued on abort.
    await call(cb => p.flush(10000, cb))
    if (commit) {
      await call(cb => p.commitTransaction(10000, cb))
      committed.push(...values)
    } else {
      await call(cb => p.abortTransaction(10000, cb))
    }
  }
  await new Promise(resolve => p.disconnect(resolve))

  const rc = await consume('rdk-rc', 'read_committed', committed.length)
  const bad = rc.filter(v => v.startsWith('a'))
  const missing = committed.filter(v => !rc.includes(v))
  if (bad.length || missing.length || rc.length !== committed.length) {
    console.log(`read_committed wrong: ${rc.length} records, aborted ${bad}, missing ${missing}`)
    process.exit(1)
  }
  const ru = await consume('rdk-ru', 'read_uncommitted', 50)
  if (ru.length !== 50) {
    console.log(`read_uncommitted got ${ru.length} records, want 50`)
    process.exit(1)
  }
  console.log(`rdkafka txn ok: ${rc.length} committed of 50, librdkafka ${Kafka.librdkafkaVersion}`)
  process.exit(0)
}

main().catch(e => { console.error(e); process.exit(1) })
