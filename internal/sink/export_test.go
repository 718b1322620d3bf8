package sink

// WriterDone is closed once p's writer goroutine returned.
func WriterDone(p *Publisher) <-chan struct{} { return p.writerDone }
