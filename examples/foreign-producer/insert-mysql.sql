-- Sends the command billing.CreateInvoice to the postroom endpoint "billing"
-- on the SQL transport, MySQL or MariaDB. The table is "watermill_" + the
-- topic (`postroom routes`); the endpoint creates it when it first runs.
INSERT INTO `watermill_billing.cmd.billing.CreateInvoice` (uuid, payload, metadata)
VALUES (
    UUID(), -- the message ID
    '{"OrderID": "order-1", "Amount": 120}', -- the payload, JSON
    '{"postroom-message-type": "billing.CreateInvoice", "postroom-source-endpoint": "webshop"}' -- metadata, a JSON object
);
