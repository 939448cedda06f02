;; The counter (agents/counter) as a tiny component: each tick reads `count` from the durable
;; state, sets it one higher and logs `tick N`, through the same host imports. It compiles in
;; milliseconds where the Python one takes seconds of CPU per node: the failover tests that
;; upgrade through many new versions use it where the compile itself is not what they test.
;; Memory: 0..15 the tick's ok result (discriminant 0); 32 `count`; 40 `info`; 48 the
;; state-get return area (option discriminant, string pointer, length); 64.. the digits of the
;; new count; 96 `tick ` then the digits; 1024.. what realloc hands out (reset each tick).
(component
  (import "agent-runtime:agent/host@0.1.0" (instance $host
    (export "log" (func (param "level" string) (param "message" string)))
    (export "state-get" (func (param "key" string) (result (option string))))
    (export "state-set" (func (param "key" string) (param "value" string)))))
  (core module $memory
    (memory (export "mem") 1)
    (global $next (export "next") (mut i32) (i32.const 1024))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $at i32)
      ;; aligned up, bounded: a value that does not fit traps instead of overwriting
      (local.set $at (i32.and (i32.add (global.get $next) (i32.const 7)) (i32.const -8)))
      (if (i32.gt_u (i32.add (local.get $at) (local.get 3)) (i32.const 65536))
        (then unreachable))
      (global.set $next (i32.add (local.get $at) (local.get 3)))
      (local.get $at)))
  (core instance $mi (instantiate $memory))
  (core func $log (canon lower (func $host "log") (memory (core memory $mi "mem"))))
  (core func $get
    (canon lower (func $host "state-get")
      (memory (core memory $mi "mem")) (realloc (core func $mi "realloc"))))
  (core func $set (canon lower (func $host "state-set") (memory (core memory $mi "mem"))))
  (core module $m
    (import "mem" "mem" (memory 1))
    (import "mem" "next" (global $next (mut i32)))
    (import "host" "log" (func $log (param i32 i32 i32 i32)))
    (import "host" "state-get" (func $get (param i32 i32 i32)))
    (import "host" "state-set" (func $set (param i32 i32 i32 i32)))
    (data (i32.const 32) "count")
    (data (i32.const 40) "info")
    (data (i32.const 96) "tick ")
    (func (export "tick") (result i32)
      (local $count i32) (local $p i32) (local $end i32) (local $digits i32) (local $n i32)
      (global.set $next (i32.const 1024))
      (call $get (i32.const 32) (i32.const 5) (i32.const 48))
      ;; the stored count (absent: 0), parsed as decimal digits
      (if (i32.load8_u (i32.const 48))
        (then
          (local.set $p (i32.load (i32.const 52)))
          (local.set $end (i32.add (local.get $p) (i32.load (i32.const 56))))
          (block $done
            (loop $digit
              (br_if $done (i32.ge_u (local.get $p) (local.get $end)))
              (local.set $count
                (i32.add (i32.mul (local.get $count) (i32.const 10))
                  (i32.sub (i32.load8_u (local.get $p)) (i32.const 48))))
              (local.set $p (i32.add (local.get $p) (i32.const 1)))
              (br $digit)))))
      (local.set $count (i32.add (local.get $count) (i32.const 1)))
      ;; its digits, written backwards from 80 down, then copied after `tick `
      (local.set $n (local.get $count))
      (local.set $p (i32.const 80))
      (loop $write
        (local.set $p (i32.sub (local.get $p) (i32.const 1)))
        (i32.store8 (local.get $p) (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
        (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
        (br_if $write (local.get $n)))
      (local.set $digits (i32.sub (i32.const 80) (local.get $p)))
      (memory.copy (i32.const 101) (local.get $p) (local.get $digits))
      (call $set (i32.const 32) (i32.const 5) (local.get $p) (local.get $digits))
      (call $log (i32.const 40) (i32.const 4) (i32.const 96) (i32.add (i32.const 5) (local.get $digits)))
      (i32.const 0)))
  (core instance $i (instantiate $m
    (with "mem" (instance $mi))
    (with "host" (instance
      (export "log" (func $log))
      (export "state-get" (func $get))
      (export "state-set" (func $set))))))
  (func (export "tick") (result (result (error string)))
    (canon lift (core func $i "tick") (memory (core memory $mi "mem")))))
