// Sends the command billing.CreateInvoice to the postroom endpoint
// "billing" over RabbitMQ, as bus.Send does from Go.
//
//   npm ci && node publish.js
//
// POSTROOM_AMQP_URL names the broker. TOPIC is the exchange: the command
// topic of the message type for the endpoint (`postroom routes`, or
// bus.CommandTopic("billing", "billing.CreateInvoice") in Go).
// MESSAGE_ID sets the message ID (default: a new UUID); a message sent
// again with the same ID is a duplicate that the endpoint's inbox skips.
'use strict';
const amqp = require('amqplib');
const { randomUUID } = require('node:crypto');

const url = process.env.POSTROOM_AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672/';
const topic = process.env.TOPIC || 'billing.cmd.billing.CreateInvoice';
const messageId = process.env.MESSAGE_ID || randomUUID();

async function main() {
  const conn = await amqp.connect(url);
  try {
    // A confirm channel: waitForConfirms resolves once the broker has the message.
    const ch = await conn.createConfirmChannel();
    ch.on('error', (err) => console.error(`publish: ${err.message}`)); // 404: no such exchange
    let returned = false;
    ch.on('return', () => {
      returned = true; // mandatory: no queue took it (the endpoint never ran, or a typo)
    });
    const payload = { OrderID: 'order-1', Amount: 120 }; // JSON, as the Go type decodes it
    ch.publish(topic, '', Buffer.from(JSON.stringify(payload)), {
      messageId, // the message ID (or the header _watermill_message_uuid)
      contentType: 'application/json',
      persistent: true,
      mandatory: true,
      headers: {
        'postroom-message-type': 'billing.CreateInvoice', // optional; if set, the handler's type
        'postroom-source-endpoint': 'webshop', // the sender, part of the inbox key
        'webshop-attempt': 1, // any AMQP type: metadata "1"
      },
    });
    await ch.waitForConfirms();
    if (returned) {
      throw new Error(`no queue takes ${topic}: has the endpoint run once?`);
    }
    console.log(`sent ${messageId} to ${topic}`);
  } finally {
    await conn.close();
  }
}

main().catch((err) => {
  console.error(`publish: ${err.message}`);
  process.exit(1);
});
