;; A failing agent whose error is written to deceive an operator: `tick` returns err(HOSTILE of
;; tests/console/test_console_browser.py): a screen clear, a carriage return, "APPROVED", a C1
;; control, reversed text and a zero-width space, 33 bytes of UTF-8.
;; Return area at 0: discriminant 1 (err), string pointer 16, string length 33.
(component
  (core module $m
    (memory (export "mem") 1)
    (data (i32.const 0) "\01\00\00\00\10\00\00\00\21\00\00\00")
    (data (i32.const 16) "\1b[2J\0dAPPROVED \c2\9b2J \e2\80\aeevorppa\e2\80\8b!")
    (func (export "tick") (result i32) (i32.const 0)))
  (core instance $i (instantiate $m))
  (func (export "tick") (result (result (error string)))
    (canon lift (core func $i "tick") (memory (core memory $i "mem")))))
