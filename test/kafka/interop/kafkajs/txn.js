// Transactional producer through a Rosetta Kafka listener with kafkajs:
// committed, aborted and committed again, interleaved on two partitions;
// a read_committed consumer must see exactly the committed records (even
// where aborted ones share a fetch response), a read_uncommitted one all.
// Usage: node txn.js host:port topic
const { Kafka, logLevel } = require('kafkajs')

const [broker, topic] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'kafkajs-txn', brokers: [broker], logLevel: logLevel.WARN })

async function consume (group, readUncommitted, want) {
  const consumer = kafka.consumer({ groupId: group, readUncommitted, maxWaitTimeInMs: 200 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const seen = []
  await consumer.run({ eachMessage: async ({ message }) => { seen.push(message.value.toString()) } })
  const deadline = Date.now() + 30000
  while (seen.length < want && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, 100))
  await new Promise(resolve => setTimeout(resolve, 1500)) // nothing more arrives
  await consumer.disconnect()
  return seen
}

async function main () {
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: 2 }] })
  await admin.disconnect()

  const producer = kafka.producer({ transactionalId: 'kafkajs-txn-id', idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const committed = []
  for (const [name, commit] of [['c1', true], ['a1', false], ['c2', true], ['a2', false], ['c3', true]]) {
    const txn = await producer.transaction()
    const messages = []
    for (let i = 0; i < 10; i++) messages.push({ partition: i % 2, value: `${name}-${i}` })
    await txn.send({ topic, messages })
    if (commit) {
      await txn.commit()
      committed.push(...messages.map(m => m.value))
    } else {
      await txn.abort()
    }
  }
  await producer.disconnect()

  const rc = await consume('kjs-rc', false, committed.length)
  const bad = rc.filter(v => v.startsWith('a'))
  const missing = committed.filter(v => !rc.includes(v))
  if (bad.length || missing.length || rc.length !== committed.length) {
    console.log(`read_committed wrong: ${rc.length} records, aborted ${bad}, missing ${missing}`)
    process.exit(1)
  }
  const ru = await consume('kjs-ru', true, 50)
  if (ru.length !== 50) {
    console.log(`read_uncommitted got ${ru.length} records, want 50`)
    process.exit(1)
  }
  console.log(`kafkajs txn ok: ${rc.length} committed of 50`)
  process.exit(0)
}

main().catch(e => { console.error(e); process.exit(1) })
