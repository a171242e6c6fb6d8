// Produces and consumes through a Rosetta Kafka listener with kafkajs:
// a producer (gzip) and a consumer group reading everything back, and a
// dynamic broker config set and described through the admin client.
// Usage: node interop.js host:port topic count
const { Kafka, CompressionTypes, ConfigResourceTypes, logLevel } = require('kafkajs')

async function main () {
  const [broker, topic, countArg] = process.argv.slice(2)
  const count = parseInt(countArg, 10)
  const kafka = new Kafka({ clientId: 'kafkajs-interop', brokers: [broker], logLevel: logLevel.WARN })
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: 4 }] })
  const relogin = 'sasl.kerberos.min.time.before.relogin'
  await admin.alterConfigs({ resources: [{ type: ConfigResourceTypes.BROKER, name: '1', configEntries: [{ name: relogin, value: '58000' }] }] })
  const described = await admin.describeConfigs({ resources: [{ type: ConfigResourceTypes.BROKER, name: '1', configNames: [relogin] }], includeSynonyms: false })
  const entry = described.resources[0].configEntries.find((e) => e.configName === relogin)
  if (!entry || entry.configValue !== '58000') {
    throw new Error(`broker config not applied: ${JSON.stringify(described.resources[0])}`)
  }
  await admin.disconnect()

  const producer = kafka.producer()
  await producer.connect()
  for (let i = 0; i < count; i += 50) {
    const messages = []
    for (let j = i; j < Math.min(i + 50, count); j++) {
      messages.push({ key: `k${j}`, value: `v${j}`, headers: { n: `${j}` } })
    }
    await producer.send({ topic, compression: CompressionTypes.GZIP, messages })
  }
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId: `${topic}-group`, sessionTimeout: 10000, heartbeatInterval: 500 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const seen = new Set()
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out with ${seen.size}/${count}`)), 60000)
    consumer.run({
      eachMessage: async ({ message }) => {
        const k = message.key.toString()
        if (message.value.toString() !== `v${k.slice(1)}` || message.headers.n.toString() !== k.slice(1)) {
          reject(new Error(`bad message ${k}`))
        }
        seen.add(k)
        if (seen.size === count) {
          clearTimeout(timer)
          resolve()
        }
      }
    }).catch(reject)
  })
  await consumer.disconnect()
  console.log(`kafkajs ok: ${seen.size} messages`)
}

main().catch((err) => { console.error(err); process.exit(1) })
