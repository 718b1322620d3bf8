package watermillforwarder

// SetAfterPublish makes f call fn after each counted PubAck with the new
// Relayed total; set it before Run.
func SetAfterPublish(f *Forwarder, fn func(relayed int64)) { f.afterPublish = fn }

// CancelSubscription cancels the context of f's subscription, as a stop
// past CloseTimeout does: watermill-sql's batch transaction rolls back.
func CancelSubscription(f *Forwarder) { f.subCancel() }
