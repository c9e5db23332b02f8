-- Sends the command billing.CreateInvoice to the postroom endpoint "billing"
-- on the SQL transport, PostgreSQL. The table is "watermill_" + the topic
-- (`postroom routes`); the endpoint creates it when it first runs.
INSERT INTO "watermill_billing.cmd.billing.CreateInvoice" (uuid, payload, metadata, transaction_id)
VALUES (
    gen_random_uuid()::text, -- the message ID
    convert_to('{"OrderID": "order-1", "Amount": 120}', 'UTF8'), -- the payload, JSON
    '{"postroom-message-type": "billing.CreateInvoice", "postroom-source-endpoint": "webshop"}', -- metadata, a JSON object
    pg_current_xact_id() -- what watermill-sql orders and reads by
);
